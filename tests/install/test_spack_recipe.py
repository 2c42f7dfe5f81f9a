#!/usr/bin/env python3
"""Checks share/spack/packages/meshtrain/package.py without Spack.

A stub of the `spack.package` API (the directives record their calls; CMakePackage.define renders
-D arguments as Spack does) is put on sys.path in a temporary directory, the recipe is imported
and its class checked: bases, version, variants, conflicts, the dependencies with their conditions,
and cmake_args() for a CPU spec and a +cuda+nccl spec. Every MESHTRAIN_* option the recipe passes
must be an option() of the project's CMake files. Exits 1 naming each mismatch.

    test_spack_recipe.py --source-dir REPO
"""
import argparse
import importlib.util
import pathlib
import re
import sys
import tempfile

SPACK_STUB = '''
"""A stand-in for spack.package: records directives, renders CMake defines."""
DIRECTIVES = []


def _directive(kind):
    def record(*args, **kwargs):
        DIRECTIVES.append((kind, args, kwargs))
    return record


version = _directive("version")
variant = _directive("variant")
conflicts = _directive("conflicts")
depends_on = _directive("depends_on")
requires = _directive("requires")
maintainers = _directive("maintainers")
license = _directive("license")


class CudaPackage:
    cuda_arch_values = ("70", "80", "90")


class CMakePackage:
    run_tests = False

    def define(self, name, value):
        if isinstance(value, bool):
            return f"-D{name}:BOOL={'ON' if value else 'OFF'}"
        if isinstance(value, (list, tuple)):
            value = ";".join(str(v) for v in value)
        return f"-D{name}:STRING={value}"

    def define_from_variant(self, name, variant_name):
        return self.define(name, self.spec.variant_enabled(variant_name))
'''


class FakeSpec:
    """Enough of a concrete spec for the recipe: variants, cuda_arch, compiler, dependencies."""

    def __init__(self, name, variants=(), cuda_arch="none", compiler="gcc", deps=(), **attrs):
        self.prefix = f"/spack/opt/{name}"
        self.__dict__.update(attrs)
        self.variants_on = set(variants)
        self.cuda_arch = cuda_arch
        self.compiler = compiler
        self.deps = {dep.name: dep for dep in deps}
        self.name = name

    def variant_enabled(self, name):
        return name in self.variants_on

    def __getitem__(self, name):
        return self.deps[name]

    def satisfies(self, constraint):
        for token in constraint.split():
            if token.startswith("^"):
                name, *flags = re.split(r"(?=[+~])", token[1:])
                dep = self.deps.get(name)
                if dep is None or not all(
                    (f[1:] in dep.variants_on) == (f[0] == "+") for f in flags):
                    return False
            elif token.startswith("%"):
                if token[1:] != self.compiler:
                    return False
            elif token.startswith("cuda_arch="):
                if token.split("=", 1)[1] != self.cuda_arch:
                    return False
            else:
                for sign, name in re.findall(r"([+~])(\w+)", token):
                    if (name in self.variants_on) != (sign == "+"):
                        return False
        return True


def cmake_options(source_dir):
    paths = [source_dir / "CMakeLists.txt"]
    for folder in ("src", "io", "share/cmake"):
        paths += (source_dir / folder).rglob("CMakeLists.txt")
    names = set()
    for path in paths:
        names.update(re.findall(r"^\s*option\((MESHTRAIN_\w+)", path.read_text(), re.M))
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", type=pathlib.Path, required=True)
    args = parser.parse_args()
    recipe = args.source_dir / "share/spack/packages/meshtrain/package.py"
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    sys.dont_write_bytecode = True  # no __pycache__ beside the recipe in the source tree
    with tempfile.TemporaryDirectory() as stub_root:
        stub = pathlib.Path(stub_root) / "spack"
        stub.mkdir()
        (stub / "__init__.py").write_text("")
        (stub / "package.py").write_text(SPACK_STUB)
        sys.path.insert(0, stub_root)
        spec = importlib.util.spec_from_file_location("meshtrain_recipe", recipe)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        import spack.package as api

    cls = module.Meshtrain
    check(issubclass(cls, api.CMakePackage) and issubclass(cls, api.CudaPackage),
          "Meshtrain is not a CMakePackage and a CudaPackage")
    check(getattr(cls, "git", "").endswith(".git"), "no git URL")

    def directives(kind):
        return [(a, k) for d, a, k in api.DIRECTIVES if d == kind]

    check((("main",), {"branch": "main"}) in directives("version"), "no version main from branch main")
    check(any(a[0] == "nccl" and k.get("default") is False for a, k in directives("variant")),
          "no variant nccl (default off)")
    check(any(a == ("+nccl",) and k.get("when") == "~cuda" for a, k in directives("conflicts")),
          "+nccl without +cuda is not a conflict")
    check(any(a[0] == "cudnn" and k.get("default") is False for a, k in directives("variant")),
          "no variant cudnn (default off)")
    check(any(a == ("+cudnn",) and k.get("when") == "~cuda" for a, k in directives("conflicts")),
          "+cudnn without +cuda is not a conflict")

    deps = [(a[0], k.get("when"), k.get("type")) for a, k in directives("depends_on")]
    for name in ("mpi", "hdf5@1.10:+mpi", "kokkos@4:", "blas", "boost@1.74:+program_options", "fmt",
                 "nlohmann-json@3.10:", "random123", "xxhash", "sentencepiece"):
        check((name, None, None) in deps, f"no unconditional depends_on({name!r})")
    check(("googletest", None, "test") in deps, "googletest is not a test dependency")
    check(("kokkos+cuda+cuda_lambda", "+cuda", None) in deps, "+cuda does not ask for kokkos+cuda+cuda_lambda")
    check(("nccl", "+nccl", None) in deps, "+nccl does not depend on nccl")
    check(("cudnn@9:", "+cudnn", None) in deps, "+cudnn does not depend on cudnn@9:")
    check(("cudnn-frontend@1:", "+cudnn", None) in deps, "+cudnn does not depend on cudnn-frontend@1:")
    check(("kokkos+wrapper", "+cuda %gcc", None) in deps, "+cuda with gcc does not ask for Kokkos' nvcc_wrapper")
    for arch in api.CudaPackage.cuda_arch_values:
        check((f"kokkos cuda_arch={arch}", f"+cuda cuda_arch={arch}", None) in deps,
              f"cuda_arch={arch} is not propagated to kokkos")

    # cmake_args for a CPU build and for a GPU build through nvcc_wrapper.
    package = cls.__new__(cls)
    package.spec = FakeSpec("meshtrain", deps=[FakeSpec("kokkos")])
    cpu = package.cmake_args()
    for expected in ("-DMESHTRAIN_ENABLE_CUDA:BOOL=OFF", "-DMESHTRAIN_ENABLE_NCCL:BOOL=OFF",
                     "-DMESHTRAIN_ENABLE_CUDNN:BOOL=OFF",
                     "-DMESHTRAIN_BUILD_TESTS:BOOL=OFF", "-DMESHTRAIN_BUILD_BENCH:BOOL=OFF",
                     "-DMESHTRAIN_NATIVE:BOOL=OFF", "-DKokkos_ROOT:STRING=/spack/opt/kokkos"):
        check(expected in cpu, f"CPU cmake_args lack {expected}: {cpu}")
    check(not any("CMAKE_CXX_COMPILER" in a for a in cpu), f"CPU cmake_args set a compiler: {cpu}")

    wrapper = FakeSpec("kokkos-nvcc-wrapper", kokkos_cxx="/spack/opt/kokkos-nvcc-wrapper/bin/nvcc_wrapper")
    package.spec = FakeSpec("meshtrain", ["cuda", "nccl"], cuda_arch="90",
                            deps=[FakeSpec("kokkos", ["cuda", "cuda_lambda", "wrapper"], cuda_arch="90"),
                                  wrapper, FakeSpec("cuda"), FakeSpec("nccl")])
    package.run_tests = True
    gpu = package.cmake_args()
    for expected in ("-DMESHTRAIN_ENABLE_CUDA:BOOL=ON", "-DMESHTRAIN_ENABLE_NCCL:BOOL=ON",
                     "-DMESHTRAIN_BUILD_TESTS:BOOL=ON", "-DCUDAToolkit_ROOT:STRING=/spack/opt/cuda",
                     f"-DCMAKE_CXX_COMPILER:STRING={wrapper.kokkos_cxx}"):
        check(expected in gpu, f"+cuda+nccl cmake_args lack {expected}: {gpu}")

    package.spec = FakeSpec("meshtrain", ["cuda", "cudnn"], cuda_arch="90",
                            deps=[FakeSpec("kokkos", ["cuda", "cuda_lambda"], cuda_arch="90"), FakeSpec("cuda"),
                                  FakeSpec("cudnn"), FakeSpec("cudnn-frontend")])
    cudnn = package.cmake_args()
    for expected in ("-DMESHTRAIN_ENABLE_CUDNN:BOOL=ON", "-DCUDNN_ROOT:STRING=/spack/opt/cudnn",
                     "-Dcudnn_frontend_ROOT:STRING=/spack/opt/cudnn-frontend"):
        check(expected in cudnn, f"+cuda+cudnn cmake_args lack {expected}: {cudnn}")

    options = cmake_options(args.source_dir)
    for arg in sorted(set(cpu + gpu + cudnn)):
        name = re.match(r"-D(\w+)", arg).group(1)
        if name.startswith("MESHTRAIN_"):
            check(name in options, f"the recipe sets {name}, which no CMakeLists.txt declares (options: {sorted(options)})")

    for failure in failures:
        print(f"test_spack_recipe: {failure}", file=sys.stderr)
    if not failures:
        print(f"test_spack_recipe: ok ({len(api.DIRECTIVES)} directives, {len(cpu)} + {len(gpu)} cmake args)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

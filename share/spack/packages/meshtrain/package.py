# meshtrain's Spack recipe (package API v1: `from spack.package import *`, which Spack 0.22+ and
# Spack 1.x read). From a checkout:
#
#   spack repo add share/spack
#   spack install meshtrain                          # CPU ranks: host Kokkos, OpenBLAS GEMMs, MPI
#   spack install meshtrain+cuda+nccl cuda_arch=90   # GPUs: Kokkos CUDA, cuBLAS, NCCL collectives
#   spack install meshtrain+cuda+nccl+cudnn cuda_arch=90   # ... and cuDNN's fused attention
#
# The installed prefix holds bin/meshtrain, the libraries with a CMake package
# (find_package(meshtrain)), share/meshtrain/{jobs,slurm} and share/doc/meshtrain.

from spack.package import *


class Meshtrain(CMakePackage, CudaPackage):
    """A C++20 trainer for GPT-2-style language models on Slurm clusters: data, tensor and
    pipeline parallelism over MPI (NCCL on GPUs), Kokkos kernels, ZeRO, and parallel-HDF5
    checkpoints that any layout can resume."""

    # The checkout names no public remote yet: point these at the project's repository.
    homepage = "https://github.com/meshtrain/meshtrain"
    git = "https://github.com/meshtrain/meshtrain.git"

    version("main", branch="main")

    variant("nccl", default=False, description="NCCL collectives between GPUs (needs +cuda)")
    conflicts("+nccl", when="~cuda", msg="the NCCL backend runs on GPUs: use +cuda+nccl")
    variant("cudnn", default=False, description="cuDNN's fused attention for bf16/fp16 (needs +cuda)")
    conflicts("+cudnn", when="~cuda", msg="cuDNN's attention runs on GPUs: use +cuda+cudnn")
    conflicts("+cuda", when="cuda_arch=none", msg="Kokkos' CUDA backend needs a GPU: set cuda_arch")

    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("cmake@3.22:", type="build")

    depends_on("mpi")
    depends_on("hdf5@1.10:+mpi")
    depends_on("kokkos@4:")
    # Kokkos' CUDA backend for the layer kernels, built for the same GPUs as meshtrain.
    depends_on("kokkos+cuda+cuda_lambda", when="+cuda")
    depends_on("kokkos+wrapper", when="+cuda %gcc")
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"nccl cuda_arch={_arch}", when=f"+nccl cuda_arch={_arch}")
    depends_on("nccl", when="+nccl")
    # cuDNN 9's graph API through NVIDIA's header-only C++ frontend (src/kernels/CMakeLists.txt).
    depends_on("cudnn@9:", when="+cudnn")
    depends_on("cudnn-frontend@1:", when="+cudnn")
    depends_on("blas")  # the host GEMM dispatch (OpenBLAS preferred)
    depends_on("boost@1.74:+program_options")
    depends_on("fmt")
    depends_on("nlohmann-json@3.10:")
    depends_on("random123")
    depends_on("xxhash")  # checkpoint checksums, tokenizer hashes
    depends_on("sentencepiece")  # subword tokenizers (io/tokenizer.cpp)
    depends_on("pcre2")  # tokenizer.json split regexes (io/tokenizer_json.cpp)
    depends_on("icu4c")  # tokenizer.json's NFC normalizer

    depends_on("googletest", type="test")
    # The end-to-end tests drive the binary from Python and read checkpoints with h5py.
    depends_on("python@3:", type="test")
    depends_on("py-numpy", type="test")
    depends_on("py-h5py", type="test")
    depends_on("py-sentencepiece", type="test")  # tests/cli/test_tokenizer.py
    depends_on("node-js@20:", type="test")  # tests/cli/test_tokenizer_json.py: Hugging Face's JavaScript tokenizers

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define_from_variant("MESHTRAIN_ENABLE_CUDA", "cuda"),
            self.define_from_variant("MESHTRAIN_ENABLE_NCCL", "nccl"),
            self.define_from_variant("MESHTRAIN_ENABLE_CUDNN", "cudnn"),
            self.define("MESHTRAIN_BUILD_TESTS", self.run_tests),
            self.define("MESHTRAIN_BUILD_BENCH", False),
            # Spack's compiler wrappers target the spec's microarchitecture; -march=native would
            # target the build node's.
            self.define("MESHTRAIN_NATIVE", False),
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
        ]
        if spec.satisfies("+cuda"):
            args.append(self.define("CUDAToolkit_ROOT", spec["cuda"].prefix))
        if spec.satisfies("+cudnn"):
            args.append(self.define("CUDNN_ROOT", spec["cudnn"].prefix))
            args.append(self.define("cudnn_frontend_ROOT", spec["cudnn-frontend"].prefix))
        if spec.satisfies("^kokkos+wrapper"):
            # Kokkos' CUDA headers compile only through its nvcc_wrapper (or clang).
            args.append(self.define("CMAKE_CXX_COMPILER", spec["kokkos-nvcc-wrapper"].kokkos_cxx))
        return args

    def setup_build_environment(self, env):
        if self.spec.satisfies("+nccl"):
            env.set("NCCL_HOME", self.spec["nccl"].prefix)  # src/parallel/CMakeLists.txt looks there

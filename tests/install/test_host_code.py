#!/usr/bin/env python3
"""The host libraries stay free of Kokkos, so that a CUDA build compiles them with the host compiler.

With a CUDA Kokkos, every translation unit of a target that links Kokkos goes to nvcc_wrapper
(share/docs/design.md, "Which compiler compiles what"). core, io, parallel and commands must not:
a Kokkos header reached from one of their sources breaks the CUDA build (the host compiler cannot
read Kokkos' CUDA headers), and moving them to nvcc brings Boost, HDF5 and fmt back to it. This
build may be a host one, so the check reads what was compiled: every source of those targets, by
its dependency file, includes no Kokkos header, and its command carries no KOKKOS_DEPENDENCE. As a
control, the kernel libraries' sources must be seen to include Kokkos.

    test_host_code.py --build-dir DIR --host-targets core io parallel commands --kokkos-targets model train
"""

import argparse
import json
import os
import re
import shlex
import sys


def objects_of(entries, target):
    marker = f"/CMakeFiles/meshtrain_{target}.dir/"
    found = []
    for entry in entries:
        args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
        out = entry.get("output") or args[args.index("-o") + 1]
        out = os.path.join(entry["directory"], out)
        if marker in out:
            found.append((entry["file"], out, " ".join(args)))
    return found


def kokkos_headers(depfile):
    with open(depfile) as f:
        text = f.read()
    return sorted(set(re.findall(r"\S*Kokkos_\w+\.hpp", text)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--host-targets", nargs="+", required=True)
    parser.add_argument("--kokkos-targets", nargs="+", required=True)
    args = parser.parse_args()
    with open(os.path.join(args.build_dir, "compile_commands.json")) as f:
        entries = json.load(f)

    failures = []
    checked = 0
    for target in args.host_targets:
        objects = objects_of(entries, target)
        if not objects:
            failures.append(f"meshtrain_{target}: no sources in compile_commands.json")
        for source, obj, command in objects:
            depfile = obj + ".d"
            if not os.path.exists(depfile):
                failures.append(f"{source}: no dependency file {depfile} (build the target first)")
                continue
            checked += 1
            headers = kokkos_headers(depfile)
            if headers:
                failures.append(f"{source} (meshtrain_{target}) includes Kokkos: {headers[0]}"
                                f"{' and more' if len(headers) > 1 else ''}")
            if "KOKKOS_DEPENDENCE" in command:
                failures.append(f"{source} (meshtrain_{target}) is compiled with Kokkos' usage requirements")

    # The control: the same reading finds Kokkos where it must be.
    for target in args.kokkos_targets:
        objects = [o for o in objects_of(entries, target) if os.path.exists(o[1] + ".d")]
        if not any(kokkos_headers(obj + ".d") for _, obj, _ in objects):
            failures.append(f"meshtrain_{target}: no source seen to include Kokkos; the check reads nothing")

    for failure in failures:
        print("FAIL:", failure)
    print(f"{checked} host sources checked in {', '.join(args.host_targets)}: "
          f"{len(failures)} problem(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""The C++ follows the repository's .clang-format: `clang-format --dry-run -Werror` reports nothing
for any tracked .cpp/.hpp file (tests/install/consumer, a stand-alone project, included).

usage: test_code_format.py --source-dir DIR [--clang-format clang-format]
"""
import argparse
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--clang-format", default="clang-format")
    args = ap.parse_args()
    files = subprocess.run(["git", "-C", args.source_dir, "ls-files", "*.cpp", "*.hpp"], capture_output=True,
                           text=True, check=True).stdout.split()
    if not files:
        sys.exit(f"no C++ files tracked under {args.source_dir}: is it a git checkout?")
    unformatted = []
    for name in files:
        done = subprocess.run([args.clang_format, "--dry-run", "-Werror", name], cwd=args.source_dir,
                              capture_output=True, text=True)
        if done.returncode != 0:
            unformatted.append((name, done.stderr.count(": error:") + done.stderr.count(": warning:")))
    print(f"{len(files)} files checked with {args.clang_format}")
    if unformatted:
        for name, n in unformatted:
            print(f"  {name}: {n} place(s) differ from .clang-format")
        sys.exit(f"{len(unformatted)} file(s) need formatting: run `clang-format -i` on them (or `git clang-format`)")


if __name__ == "__main__":
    main()

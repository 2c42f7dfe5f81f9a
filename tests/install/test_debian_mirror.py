#!/usr/bin/env python3
"""The OpenMP Kokkos recipe takes its Debian mirror from the machine's apt configuration only.

With APT_CONFIG pointing at an empty configuration (no sources, no apt.conf.d), the lookup
(share/scripts/debian-mirror.sh) exits 3 with a message naming what it looked for and how to add a
mirror, and prints nothing on stdout; the recipe (share/scripts/kokkos-openmp.sh, its prefix moved
to an empty temporary folder so that it does not return early) stops there with the same code and
message and never starts a fetch. The control: under the machine's own configuration the lookup
prints the site of a bookworm main index, when apt's lists hold one. And no script or document of
the repository names a package host.

    test_debian_mirror.py --source-dir DIR
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

SOURCE = "."


def run(args, env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)


class DebianMirror(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        etc = os.path.join(self.tmp.name, "etc")
        os.makedirs(os.path.join(etc, "apt.conf.d"))
        os.makedirs(os.path.join(etc, "sources.list.d"))
        self.apt_conf = os.path.join(self.tmp.name, "apt.conf")
        with open(self.apt_conf, "w") as f:
            f.write(f'Dir::Etc "{etc}";\n')

    def tearDown(self):
        self.tmp.cleanup()

    def assert_refusal(self, p):
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        for words in ("bookworm", "component main", "sources.list", "apt-get update"):
            self.assertIn(words, p.stderr)
        self.assertNotRegex(p.stdout + p.stderr, r"https?://")

    def test_lookup_refuses_without_a_configured_mirror(self):
        p = run([os.path.join(SOURCE, "share/scripts/debian-mirror.sh")], {"APT_CONFIG": self.apt_conf})
        self.assert_refusal(p)
        self.assertEqual(p.stdout, "")

    def test_recipe_stops_before_fetching(self):
        prefix = os.path.join(self.tmp.name, "prefix", "kokkos")
        p = run(["bash", os.path.join(SOURCE, "share/scripts/kokkos-openmp.sh")],
                {"APT_CONFIG": self.apt_conf, "MESHTRAIN_KOKKOS_OPENMP_PREFIX": prefix})
        self.assert_refusal(p)
        self.assertNotIn("fetching", p.stdout + p.stderr)
        self.assertFalse(os.path.exists(prefix), "nothing is installed")

    def test_lookup_reads_the_machines_configuration(self):
        listed = subprocess.run(["apt-get", "indextargets", "--format", "$(SITE)", "Identifier: Packages",
                                 "Origin: Debian", "Codename: bookworm", "Component: main"],
                                capture_output=True, text=True).stdout.split()
        if not listed:
            self.skipTest("this machine's apt lists hold no bookworm main index")
        p = run([os.path.join(SOURCE, "share/scripts/debian-mirror.sh")], {})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), listed[0])

    def test_the_repository_names_no_package_host(self):
        files = subprocess.run(["git", "-C", SOURCE, "ls-files", "*.sh", "*.py", "*.md", "*.ini", "*.txt",
                                "*.cmake", "*.sbatch", "CMakeLists.txt", "CMakePresets.json"],
                               capture_output=True, text=True, check=True).stdout.split()
        hosts = re.compile(r"(deb|ftp|security|archive|http\.?)\.debian\.org|ubuntu\.com|"
                           r"registry\.npmjs\.org|pypi\.org|files\.pythonhosted\.org|conda\.anaconda\.org")
        found = []
        for name in files:
            with open(os.path.join(SOURCE, name), errors="replace") as f:
                for number, line in enumerate(f, 1):
                    if hosts.search(line):
                        found.append(f"{name}:{number}: {line.strip()}")
        self.assertEqual(found, [])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    args, rest = ap.parse_known_args()
    SOURCE = args.source_dir
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

#!/usr/bin/python3
"""One HTTP server stack and one HTTP client stack (docs/development.md, "HTTP: one server stack, one client
stack"), kept so by reading the sources: Boost.Beast only inside http/server, cpprestsdk only inside
http/client (and the benchmark that measures its listener), civetweb and prometheus-cpp's Exposer nowhere,
and no hand-written listening socket outside the server library."""
import os
import re
import unittest

from chartlib import SOURCE_DIR

SOURCE_DIRS = ["common", "http", "kernels", "runtime", "agent", "operator", "tests", "bench", "cmake"]
CPPREST_ALLOWED = {"http/client/src/client.cc", "bench/server/http_layer_bench.cc"}


def sources(exts=(".cc", ".h", ".cu", ".cuh")):
    for top in SOURCE_DIRS:
        for root, _dirs, files in os.walk(os.path.join(SOURCE_DIR, top)):
            for name in files:
                if name.endswith(exts):
                    path = os.path.join(root, name)
                    with open(path, errors="replace") as f:
                        yield os.path.relpath(path, SOURCE_DIR), f.read()


def cmake_files():
    for rel, text in sources(("CMakeLists.txt", ".cmake")):
        yield rel, text
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        yield "CMakeLists.txt", f.read()


class HttpStack(unittest.TestCase):
    def test_beast_is_included_only_by_the_server_library(self):
        for rel, text in sources():
            if re.search(r"#include\s*[<\"]boost/beast", text):
                with self.subTest(file=rel):
                    self.assertTrue(rel.startswith("http/server/src/"), f"{rel} includes Boost.Beast")

    def test_cpprestsdk_is_included_only_by_the_client_facade(self):
        for rel, text in sources():
            if re.search(r"#include\s*[<\"](cpprest|pplx)/", text):
                with self.subTest(file=rel):
                    self.assertIn(rel, CPPREST_ALLOWED, f"{rel} includes cpprestsdk: use infergate/http/client.h")

    def assert_absent(self, rel, text, pattern, why):
        m = re.search(pattern, text)
        self.assertIsNone(m, f"{rel}: {m.group(0) if m else ''}: {why}")

    def test_civetweb_and_the_prometheus_exposer_are_used_nowhere(self):
        for rel, text in sources():
            with self.subTest(file=rel):
                self.assert_absent(rel, text, r"#include\s*[<\"](civetweb\.h|prometheus/exposer\.h)",
                                   "serve with infergate::http::Server")
        for rel, text in cmake_files():
            with self.subTest(file=rel):
                self.assert_absent(rel, text, r"civetweb|prometheus-cpp::pull", "link infergate_http instead")

    def test_no_hand_written_listening_socket_outside_the_server_library(self):
        for rel, text in sources():
            if rel.startswith("http/"):
                continue
            with self.subTest(file=rel):
                self.assert_absent(rel, text, r"::(listen|accept4?)\s*\(", "serve with infergate::http::Server")


if __name__ == "__main__":
    unittest.main(verbosity=2)

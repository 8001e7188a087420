#!/usr/bin/python3
"""scripts/check-layers.py on small made-up link graphs: a build that holds its table passes, and a
wrong-way link (direct or through another library), a target in no layer, a cycle and an object of a
forbidden library inside a binary each fail with a message that names the link. Also: the repository's
own table parses and says what DESIGN says about the operator and the planner."""
import importlib.util
import json
import os
import tempfile
import unittest
from unittest import mock

SOURCE_DIR = os.environ.get("INFERGATE_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
_spec = importlib.util.spec_from_file_location("check_layers", os.path.join(SOURCE_DIR, "scripts", "check-layers.py"))
check_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_layers)

TABLE = """
<!-- layers:begin -->
| layer | targets | may link | what |
|---|---|---|---|
| `common` | `lib_common` | | bottom |
| `model` | `lib_config` | `common` | configs |
| `planner` | `lib_planner` | `model` | planner |
| `runtime` | `lib_tokenizer`, `bin_runtime` | `planner` | the rest |
| `operator` | `lib_operator`, `bin_operator` | `planner` | uses the planner only |
<!-- layers:end -->
"""


def target(dir_, public=(), private=(), type_="STATIC_LIBRARY", file_=""):
    return {"type": type_, "dir": dir_, "file": file_, "public": list(public), "private": list(private)}


def good_graph():
    return {
        "lib_common": target("common"),
        "lib_config": target("runtime/model", public=["lib_common"]),
        "lib_planner": target("runtime/planner", public=["lib_config"]),
        "lib_tokenizer": target("runtime/model", public=["lib_config"], private=["lib_common"]),
        "bin_runtime": target("runtime", private=["lib_tokenizer", "lib_planner"], type_="EXECUTABLE"),
        "lib_operator": target("operator", public=["lib_planner"]),
        "bin_operator": target("operator", private=["lib_operator"], type_="EXECUTABLE"),
        "fixture": target("tests/fixtures", public=["lib_operator", "lib_tokenizer"]),
    }


def errors_of(graph, table=TABLE):
    return check_layers.check_links(check_layers.parse_table(table), graph)


class Links(unittest.TestCase):
    def test_a_build_that_holds_the_table_passes(self):
        self.assertEqual(errors_of(good_graph()), [])

    def test_a_wrong_way_link_fails_naming_both_targets_and_layers(self):
        g = good_graph()
        g["lib_operator"]["private"].append("lib_tokenizer")  # the operator may use the planner only
        errors = errors_of(g)
        self.assertTrue(any("lib_operator (layer operator) links lib_tokenizer (layer runtime)" in e for e in errors),
                        errors)

    def test_a_wrong_way_link_through_another_library_fails_with_its_path(self):
        g = good_graph()
        g["lib_planner"]["private"].append("lib_tokenizer")  # planner -> runtime: wrong, and the operator
        errors = errors_of(g)
        self.assertTrue(any("lib_planner (layer planner) links lib_tokenizer" in e for e in errors), errors)
        self.assertTrue(any("bin_operator (layer operator) reaches lib_tokenizer (layer runtime)" in e
                            and "bin_operator -> lib_operator -> lib_planner -> lib_tokenizer" in e for e in errors),
                        errors)

    def test_a_lower_layer_linking_a_higher_one_fails(self):
        g = good_graph()
        g["lib_common"]["public"].append("lib_config")
        errors = errors_of(g)
        self.assertTrue(any("lib_common (layer common) links lib_config (layer model)" in e for e in errors), errors)

    def test_a_target_in_no_layer_fails_unless_it_is_test_or_benchmark_code(self):
        g = good_graph()
        g["lib_new"] = target("operator/new", public=["lib_common"])
        g["bench_thing"] = target("bench/model", private=["lib_tokenizer", "lib_operator"], type_="EXECUTABLE")
        errors = errors_of(g)
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("lib_new (operator/new/) is in no layer", errors[0])

    def test_a_library_linking_test_code_fails(self):
        g = good_graph()
        g["lib_operator"]["private"].append("fixture")
        errors = errors_of(g)
        self.assertTrue(any("lib_operator (layer operator) links fixture (layer tests)" in e for e in errors), errors)

    def test_a_link_cycle_fails(self):
        g = good_graph()
        g["lib_config"]["private"].append("lib_planner")
        errors = errors_of(g)
        self.assertTrue(any(e.startswith("a link cycle: ") and "lib_config" in e and "lib_planner" in e
                            for e in errors), errors)

    def test_a_target_listed_in_two_layers_fails(self):
        table = TABLE.replace("| `lib_operator`, `bin_operator` |", "| `lib_operator`, `bin_operator`, `lib_config` |")
        errors = errors_of(good_graph(), table)
        self.assertTrue(any("lib_config is in two layers" in e for e in errors), errors)


class Table(unittest.TestCase):
    def test_may_link_naming_an_unknown_layer_is_refused(self):
        with self.assertRaisesRegex(check_layers.InputError, "may link kernels, which is no layer"):
            check_layers.parse_table(TABLE.replace("| `planner` | `lib_planner` | `model` |",
                                                   "| `planner` | `lib_planner` | `kernels` |"))

    def test_a_page_without_the_markers_is_refused(self):
        with self.assertRaisesRegex(check_layers.InputError, "not marked"):
            check_layers.parse_table("| layer | targets | may link |\n|---|---|---|\n")

    def test_may_link_is_followed_transitively(self):
        allowed = check_layers.allowed_layers(check_layers.parse_table(TABLE))
        self.assertEqual(allowed["operator"], {"operator", "planner", "model", "common"})
        self.assertEqual(allowed["common"], {"common"})

    def test_the_repository_table_keeps_the_operator_to_the_planner_and_the_kernels_to_themselves(self):
        with open(os.path.join(SOURCE_DIR, "docs", "development.md")) as f:
            layers = check_layers.parse_table(f.read())
        allowed = check_layers.allowed_layers(layers)
        for layer in ("operator-api", "operator-core", "operator-logic", "operator-kubernetes", "operator-local",
                      "operator-app"):
            self.assertNotIn("runtime", allowed[layer], layer)
            self.assertNotIn("kernels", allowed[layer], layer)
        self.assertIn("planner", allowed["operator-app"])
        self.assertNotIn("operator-kubernetes", allowed["operator-logic"])
        self.assertNotIn("operator-kubernetes", allowed["operator-local"])
        self.assertEqual(allowed["kernels"], {"kernels", "kernels-formats"})
        self.assertEqual(allowed["agent"], {"agent", "base", "common"})
        self.assertEqual(allowed["common"], {"common"})


class Symbols(unittest.TestCase):
    def graph_with_files(self):
        g = good_graph()
        for name, t in g.items():
            t["file"] = f"/build/{name}"
        return g

    def run_symbols(self, g, symbols):
        with mock.patch.object(check_layers, "defined_globals", side_effect=lambda p: symbols[os.path.basename(p)]), \
             mock.patch.object(check_layers.os.path, "exists", return_value=True):
            return check_layers.check_symbols(check_layers.parse_table(TABLE), g)

    def symbols(self):
        # The fixture compiles a tokenizer source again (as fuzz and emulation libraries do): not a finding.
        return {"lib_common": {"c1"}, "lib_config": {"m1"}, "lib_planner": {"p1"}, "lib_tokenizer": {"t1", "t2"},
                "lib_operator": {"o1"}, "fixture": {"f1", "t1"}, "bin_runtime": {"c1", "m1", "p1", "t1", "t2", "main"},
                "bin_operator": {"c1", "m1", "p1", "o1", "main"}}

    def test_binaries_holding_only_what_their_layer_may_use_pass(self):
        self.assertEqual(self.run_symbols(self.graph_with_files(), self.symbols()), [])

    def test_an_object_of_a_forbidden_library_inside_a_binary_fails(self):
        # The link graph is clean, but a tokenizer source was compiled into the operator's library.
        s = self.symbols()
        s["bin_operator"] = s["bin_operator"] | {"t2"}
        errors = self.run_symbols(self.graph_with_files(), s)
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("bin_operator (layer operator) contains code of lib_tokenizer (layer runtime)", errors[0])
        self.assertIn("t2", errors[0])


class Main(unittest.TestCase):
    def test_exit_status_is_0_when_held_1_when_broken_and_2_on_bad_input(self):
        with tempfile.TemporaryDirectory() as d:
            table = os.path.join(d, "table.md")
            with open(table, "w") as f:
                f.write(TABLE)
            graph = os.path.join(d, "graph.json")

            def write(g):
                with open(graph, "w") as f:
                    json.dump({"source_dir": d, "targets": g}, f)

            write(good_graph())
            self.assertEqual(check_layers.main(["--graph", graph, "--table", table]), 0)
            broken = good_graph()
            broken["lib_operator"]["private"].append("lib_tokenizer")
            write(broken)
            self.assertEqual(check_layers.main(["--graph", graph, "--table", table]), 1)
            self.assertEqual(check_layers.main(["--graph", os.path.join(d, "absent.json"), "--table", table]), 2)


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/python3
"""Python's own re.match as the oracle for weights/module_rules: reads a JSON list of [pattern, name]
pairs from the file named by its argument and prints a JSON list with, for each pair, true or false
(re.match(pattern, name) is not None), or the string "error" when Python refuses the pattern."""
import json
import re
import sys

out = []
for pattern, name in json.load(open(sys.argv[1])):
    try:
        out.append(re.match(pattern, name) is not None)
    except re.error:
        out.append("error")
print(json.dumps(out))

#!/usr/bin/env python3
"""long_functions.py DIR...: the C++ functions in DIR longer than LIMIT lines (default 80, env
LIMIT), longest first: lines from the body's opening brace to its closing one, a lambda or
local class counted in the function around it. Comments and string literals are blanked
first; a brace after ')' (not if/for/while/switch/catch) opens a function. Issue 27 asks
for none over 80 in src/runtime and src/serve: python3 tools/long_functions.py src/runtime src/serve"""
import re, sys, os
LIMIT = int(os.environ.get("LIMIT", "80"))
def strip(src):
    # blank out comments, strings, chars (keep newlines)
    out = []; i = 0; n = len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i); j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j])); i = j
        elif src.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', src[i:])
            end = src.find(")" + m.group(1) + '"', i) + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", src[i:end])); i = end
        elif c == '"' or (c == "'" and not (i > 0 and src[i-1].isalnum())):
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(" " * (j + 1 - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)
def scan(path):
    s = strip(open(path).read())
    res = []; depth = 0; stack = []
    for m in re.finditer(r"[{};]", s):
        ch = m.group(); pos = m.start()
        if ch == "{":
            # header: text since previous ; { or }
            k = max(s.rfind(";", 0, pos), s.rfind("{", 0, pos), s.rfind("}", 0, pos))
            head = s[k+1:pos]
            is_fn = bool(re.search(r"\)\s*(const|noexcept|override|final|->[^{]*|\s)*$", head)) and \
                not re.search(r"\b(if|for|while|switch|catch)\s*\(", head) and depth_fn(stack) is None
            stack.append((pos, is_fn, " ".join(head.split())[-90:]))
        elif ch == "}" and stack:
            start, is_fn, head = stack.pop()
            if is_fn:
                a = s.count("\n", 0, start) + 1; b = s.count("\n", 0, pos) + 1
                if b - a + 1 > LIMIT:
                    res.append((b - a + 1, path, a, head))
    return res
def depth_fn(stack):
    for e in stack:
        if e[1]: return e
    return None
out = []
for root in sys.argv[1:]:
    for dp, _, fs in os.walk(root):
        for f in fs:
            if f.endswith((".cc", ".h", ".cpp")):
                out += scan(os.path.join(dp, f))
for n, p, a, h in sorted(out, reverse=True):
    print(f"{n:4d}  {p}:{a}  {h}")
sys.exit(1 if out else 0)

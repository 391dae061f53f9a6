#!/usr/bin/env python3
# embed_text.py IN OUT NAME: writes OUT, a header holding IN's text as `tandem::run::NAME` (raw literal).
import sys

src, out, name = sys.argv[1:4]
text = open(src).read()
assert ')TOML"' not in text
with open(out, "w") as f:
    f.write(f"// Generated from {src.split('/')[-1]} by tools/run/embed_text.py\n#pragma once\n")
    f.write(f'namespace tandem::run {{\ninline constexpr const char* {name} = R"TOML({text})TOML";\n}}\n')

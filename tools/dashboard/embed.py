#!/usr/bin/env python3
# embed.py TEMPLATE OUT ASSET...: writes OUT, a C++ file defining tandem::dashboard::page(): TEMPLATE
# with each {{name}} replaced by the asset of that file name, as bytes (no escaping to get wrong, and
# no limit on a string literal's length). The page thereby needs no network at run time.
import os
import sys

template, out, *assets = sys.argv[1:]
page = open(template, encoding="utf-8").read()
for path in assets:
    key = "{{" + os.path.basename(path) + "}}"
    assert key in page, f"{template} has no {key}"
    page = page.replace(key, open(path, encoding="utf-8").read().replace("</script", "<\\/script"))
data = page.encode("utf-8")
rows = ",\n".join(",".join(str(b) for b in data[i:i + 40]) for i in range(0, len(data), 40))
with open(out, "w") as f:
    f.write(f"// Generated from {os.path.basename(template)} and {len(assets)} assets by tools/dashboard/embed.py\n")
    f.write('#include "tools/dashboard/page.hpp"\n\nnamespace tandem::dashboard {\nnamespace {\n')
    f.write(f"constexpr char kPage[{len(data)}] = {{\n{rows}}};\n}}  // namespace\n\n")
    f.write("std::string_view page() { return {kPage, sizeof kPage}; }\n\n}  // namespace tandem::dashboard\n")

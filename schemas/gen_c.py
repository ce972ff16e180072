"""Generate recorder/iotape_record.h from trace_record.toml.

Run `python -m schemas.gen_c [OUT]`; with no OUT it prints. The header is
committed; tests/schemas/test_schema.py fails if it differs from what this writes.
"""

from __future__ import annotations

import sys

import schemas

_CTYPE = {"u8": "__u8", "u16": "__u16", "u32": "__u32", "u64": "__u64", "i16": "__s16"}


def _ident(name: str) -> str:
    return name.upper().replace("-", "_")


def render() -> str:
    cols = sorted(schemas.columns(), key=lambda c: c.offset)
    size = schemas.record_size()
    fc = schemas.file_constants()
    out = [
        "/* Generated from schemas/trace_record.toml by `python -m schemas.gen_c`.",
        " * Do not edit: change the TOML and regenerate. */",
        "#ifndef IOTAPE_RECORD_H",
        "#define IOTAPE_RECORD_H",
        "",
        "/* Fixed-width kernel types, so the BPF side (vmlinux.h) and user space",
        " * (linux/types.h) share this header unchanged. */",
        "#ifndef __VMLINUX_H__",
        "#include <linux/types.h>",
        "#endif",
        "",
        f"#define IOTAPE_LAYOUT_VERSION {schemas.layout_version()}",
        f"#define IOTAPE_RECORD_SIZE {size}",
        "",
        "struct iotape_record {",
    ]
    pos = 0
    pad = 0
    for c in cols:
        if c.offset > pos:
            out.append(f"\t__u8 _pad{pad}[{c.offset - pos}];")
            pad += 1
        decl = f"char {c.name}[16]" if c.type == "char16" else f"{_CTYPE[c.type]} {c.name}"
        out.append(f"\t{decl};{' ' * max(1, 26 - len(decl))}/* {c.doc} */")
        pos = c.offset + c.size
    if pos < size:
        out.append(f"\t__u8 _pad{pad}[{size - pos}];")
    out += ["};", ""]
    for enum_name in ("op", "stream"):
        for k, v in schemas.enum(enum_name).items():
            out.append(f"#define IOTAPE_{_ident(enum_name)}_{_ident(k)} {v}")
        out.append("")
    for k, v in schemas.bits("flag").items():
        out.append(f"#define IOTAPE_FLAG_{_ident(k)} (1u << {v})")
    out.append("")
    out.append("/* The trace file; see docs/trace-format.md. */")
    out.append(f"#define IOTAPE_FILE_VERSION {fc['version']}")
    for key in ("header_magic", "trailer_magic"):
        lit = fc[key].encode().decode("ascii").replace("\r", "\\r").replace("\n", "\\n")
        out.append(f'#define IOTAPE_{_ident(key)} "{lit}"')
    for key in ("chunk_magic", "footer_magic"):
        out.append(f"#define IOTAPE_{_ident(key)} 0x{fc[key]:08X}u")
    for key in ("chunk_header_size", "footer_header_size", "max_chunk_records", "max_json_bytes"):
        out.append(f"#define IOTAPE_{_ident(key)} {fc[key]}")
    out += ["", "#endif /* IOTAPE_RECORD_H */", ""]
    return "\n".join(out)


def main(argv: list[str]) -> None:
    text = render()
    if len(argv) > 1:
        with open(argv[1], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv)

"""Generate the C headers from the schemas: recorder/iotape_record.h (the trace
record, trace_record.toml) and workload/src/contract.h (the engine's streams,
result format and option table: trace_record.toml, contracts.toml,
workload_options.toml).

Run `python -m schemas.gen_c [OUT]` for the record header, `python -m
schemas.gen_c --workload [OUT]` for the engine's; with no OUT it prints. The
headers are committed; tests/schemas/ fails if one differs from what this writes.
"""

from __future__ import annotations

import json
import sys

import schemas
from schemas import formats, workload_options

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
    out.append(f'#define IOTAPE_FILE_FORMAT "{fc["format"]}"')
    out.append(f"#define IOTAPE_FILE_VERSION {fc['version']}")
    out.append(f"#define IOTAPE_FILE_VERSION_PLAIN {fc['plain_version']}")
    out.append(f"#define IOTAPE_FILE_VERSION_WAKES {fc['wake_version']}")
    out.append(f"#define IOTAPE_WAKE_OP {schemas.raw()['wake']['op']}")
    out.append(f"#define IOTAPE_FILE_VERSION_SCHED {fc['sched_version']}")
    out.append(f"#define IOTAPE_SCHED_OP {schemas.raw()['sched']['op']}")
    for k, col in schemas.raw()["sched"]["fields"].items():
        out.append(f"#define IOTAPE_SCHED_{_ident(k)} {col}")
    for key in ("header_magic", "trailer_magic"):
        lit = fc[key].encode().decode("ascii").replace("\r", "\\r").replace("\n", "\\n")
        out.append(f'#define IOTAPE_{_ident(key)} "{lit}"')
    for key in ("chunk_magic", "zchunk_magic", "footer_magic"):
        out.append(f"#define IOTAPE_{_ident(key)} 0x{fc[key]:08X}u")
    for key in (
        "chunk_header_size",
        "zchunk_header_size",
        "footer_header_size",
        "max_chunk_records",
        "max_json_bytes",
    ):
        out.append(f"#define IOTAPE_{_ident(key)} {fc[key]}")
    for table in ("codec", "transform"):
        for k, v in fc[table].items():
            out.append(f"#define IOTAPE_{_ident(table)}_{_ident(k)} {v}")
    out += ["", "#endif /* IOTAPE_RECORD_H */", ""]
    return "\n".join(out)


def _c_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _c_num(v: float) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def _option_line(o: workload_options.Option) -> str:
    name, help_ = _c_str(o.name), _c_str(o.help)
    if o.type == "target":
        return f"\tT({name}, {o.field}, {help_})"
    if o.type == "string":
        return f"\tS({name}, {o.field}, {_c_str(str(o.default))}, {help_})"
    kind = "I" if o.type == "int" else "D"
    lo, hi = _c_num(o.min or 0), _c_num(o.max or 0)
    return f"\t{kind}({name}, {o.field}, {_c_str(o.engine_default())}, {lo}, {hi}, {help_})"


def render_workload() -> str:
    """workload/src/contract.h: what the engine shares with the schemas."""
    opts = workload_options.options()
    streams = sorted((v, k) for k, v in schemas.enum("stream").items() if v > 0)
    if [v for v, _ in streams] != list(range(1, len(streams) + 1)):
        raise ValueError("the engine's streams are the schema's ids 1..N, without gaps")
    out = [
        "/* Generated from schemas/ (trace_record.toml, contracts.toml, workload_options.toml)",
        " * by `python -m schemas.gen_c --workload`. Do not edit: change the TOML, regenerate. */",
        "#ifndef ESE_CONTRACT_H",
        "#define ESE_CONTRACT_H",
        "",
        "/* The streams the engine accounts by: the trace schema's, id - 1 (the recorder",
        " * derives the same from thread names). */",
        "enum stream {",
        *(f"\tS_{_ident(k)}, /* {v}: {k} */" for v, k in streams),
        "\tS_N",
        "};",
        "#define ESE_STREAM_NAMES " + ", ".join(_c_str(k) for _, k in streams),
        "",
        "/* The result document (report.c). */",
        f"#define ESE_RESULT_FORMAT {_c_str(formats.ENGINE_RESULT.id)}",
        f"#define ESE_RESULT_VERSION {formats.ENGINE_RESULT.version}",
        "",
        f"#define ESE_MAX_DATABASES {opts['databases'].max}",
        f"#define ESE_MAX_THREADS {opts['threads'].max}",
        "",
    ]
    for o in opts.values():
        if o.choices:
            out.append(f"/* --{o.name} */")
            if o.enum_prefix:
                names = ", ".join(f"{o.enum_prefix}{_ident(c)}" for c in o.choices)
                out.append(f"enum {o.field.removesuffix('_name')} {{ {names} }};")
            out.append(f"#define ESE_{_ident(o.name)}_CHOICES " + ", ".join(map(_c_str, o.choices)))
    out += [
        "",
        "/* The option table: I(name, field, default, min, max, help) for an int, D for a",
        " * double, S(name, field, default, help) for a string, T(name, field, help) for a",
        " * target. */",
        "#define ESE_OPTIONS(I, D, S, T) \\",
        " \\\n".join(_option_line(o) for o in opts.values()),
        "",
        "#endif /* ESE_CONTRACT_H */",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str]) -> None:
    args = argv[1:]
    text = render()
    if args[:1] == ["--workload"]:
        args, text = args[1:], render_workload()
    if args:
        with open(args[0], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv)

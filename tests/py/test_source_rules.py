"""The layout rules of DESIGN.md and STYLE.md, checked on the source tree:
- layers point down only: a folder of src/ includes only folders below it (the
  front ends server, batch, bench and doctor share a rank: none includes another);
- the library reads no environment, except the documented places;
- no mutable process-wide state in the library (per-instance state only), and none
  at all, not even function statics, in the CUDA backend;
- src/cli/ holds thin commands: small files, small total."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
SOURCES = [p for p in SRC.rglob("*") if p.suffix in (".c", ".h", ".cu", ".cuh")]

# Bottom to top; a folder may include its own and lower ranks only.
# grammar (structured outputs: JSON Schema to a byte automaton, token masks) needs only
# base and cJSON: token bytes come in as arrays, so it sits below tokenizer, and sample,
# engine, server and batch may all use it.
RANK = {"base": 0, "telemetry": 1, "grammar": 1, "format": 2, "template": 3, "tokenizer": 4, "model": 5,
        "sample": 6, "backend": 7, "engine": 8,
        "server": 9, "batch": 9, "bench": 9, "doctor": 9, "cli": 10}

# Where src/ may read the environment: the CLI (API keys, the developer strings
# LPX_CUDA_TUNE/LPX_CUDA_TRACE/LPX_CPU_TUNE), telemetry's NVML/CUDA library test seams, and doctor's
# container detection (the environment it diagnoses).
GETENV_ALLOWED = {"src/telemetry/telemetry.c", "src/doctor/doctor.c"}


def rel(p):
    return p.relative_to(ROOT).as_posix()


def layer(p):
    return p.relative_to(SRC).parts[0]


def code_lines(p):
    """Lines with comments and string literals blanked (good enough for these checks)."""
    text = p.read_text()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    return text.splitlines()


def test_every_folder_has_a_rank():
    folders = {layer(p) for p in SOURCES}
    assert folders <= set(RANK), f"folders without a layer: {sorted(folders - set(RANK))}"


def test_layers_point_down_only():
    bad = []
    for p in SOURCES:
        me = layer(p)
        for n, line in enumerate(p.read_text().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
            if not m or m.group(1) == me:
                continue
            other = m.group(1)
            if other not in RANK or RANK[other] >= RANK[me]:
                bad.append(f"{rel(p)}:{n}: {me} includes {other}")
    assert not bad, "includes that point up or sideways:\n" + "\n".join(bad)


def test_the_library_reads_no_environment():
    bad = []
    for p in SOURCES:
        if layer(p) == "cli" or rel(p) in GETENV_ALLOWED:
            continue
        for n, line in enumerate(code_lines(p), 1):
            if re.search(r"\b(getenv|secure_getenv|environ)\b", line):
                bad.append(f"{rel(p)}:{n}: {line.strip()}")
    assert not bad, "environment read inside the library:\n" + "\n".join(bad)


MUTABLE_FILE_SCOPE = re.compile(
    r"^(static\s+|__device__\s+|__managed__\s+)*"
    r"(unsigned\s+|signed\s+|long\s+|short\s+)*[A-Za-z_][A-Za-z_0-9]*[\s\*]+\**[A-Za-z_][A-Za-z_0-9]*"
    r"\s*(\[[^\]]*\])*\s*(=[^;]*)?(,[^;]*)?;\s*$")


def test_no_mutable_file_scope_state_in_the_library():
    bad = []
    for p in SOURCES:
        if layer(p) == "cli":
            continue
        for n, line in enumerate(code_lines(p), 1):
            if not line or line[0].isspace() or "(" in line.split("=")[0]:
                continue
            if re.match(r"(typedef|extern|return|struct\s+\w+\s*;|enum|using|#)", line):
                continue
            if re.search(r"\b(const|constexpr|__constant__|_Thread_local|__thread)\b", line):
                continue
            if MUTABLE_FILE_SCOPE.match(line):
                bad.append(f"{rel(p)}:{n}: {line.strip()}")
    assert not bad, "mutable file-scope variables in the library:\n" + "\n".join(bad)


def test_no_function_statics_in_the_cuda_backend():
    bad = []
    for p in SOURCES:
        if not rel(p).startswith("src/backend/cuda/"):
            continue
        for n, line in enumerate(code_lines(p), 1):
            if re.match(r"\s+static\s", line) and not re.search(
                    r"\b(const|constexpr|__shared__)\b", line):
                bad.append(f"{rel(p)}:{n}: {line.strip()}")
    assert not bad, "function-local statics in src/backend/cuda/:\n" + "\n".join(bad)


def test_the_cli_is_thin():
    sizes = {rel(p): len(p.read_text().splitlines()) for p in (SRC / "cli").glob("*.[ch]")}
    big = {f: n for f, n in sizes.items() if n > 550}
    assert not big, f"src/cli/ files over 550 lines: {big}"
    # 3600 until quantize and perplexity (parse, call, print: ~75 lines each) came;
    # 3750 with --kv-cache-dtype on every model command and logits --tail; cmd_logits.c's
    # stepping loop has since moved to src/bench/logits_run.c, which made room for
    # serve's connection flags (#27) and its four --fallback-* flags (#21).
    assert sum(sizes.values()) <= 3750, f"src/cli/ has {sum(sizes.values())} lines"

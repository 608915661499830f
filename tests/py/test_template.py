"""Chat templates: `lpx template` must render every golden case (made by
scripts/make-template-goldens.py with transformers' own renderer) byte for
byte, and fail where transformers raises. When transformers imports here
(CI installs it without torch), the goldens are also re-rendered live."""
import datetime
import json
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TDIR = ROOT / "tests/fixtures/templates"
GOLDENS = json.loads((TDIR / "goldens.json").read_text())["cases"]
CONSTRUCTS = json.loads((TDIR / "constructs.json").read_text())["cases"]

try:
    from transformers.utils.chat_template_utils import render_jinja_template
except Exception:  # transformers missing or broken: goldens only
    render_jinja_template = None


def lpx_template(lpx_bin, tmp_path, template, messages, agp=False, bos=None, eos=None,
                 enable_thinking=None, date_string=None, extra=None):
    mfile = tmp_path / "messages.json"
    mfile.write_text(json.dumps(messages, ensure_ascii=False))
    tfile = template if isinstance(template, pathlib.Path) else tmp_path / "t.jinja"
    if not isinstance(template, pathlib.Path):
        tfile.write_bytes(template.encode())
    cmd = [lpx_bin, "template", "--file", str(tfile), "--messages", str(mfile)]
    if agp:
        cmd.append("--add-generation-prompt")
    if bos is not None:
        cmd += ["--bos", bos]
    if eos is not None:
        cmd += ["--eos", eos]
    if enable_thinking is not None:
        cmd += ["--enable-thinking", "true" if enable_thinking else "false"]
    if date_string is not None:
        cmd += ["--date-string", date_string]
    if extra:
        vfile = tmp_path / "vars.json"
        vfile.write_text(json.dumps(extra, ensure_ascii=False))
        cmd += ["--vars", str(vfile)]
    return subprocess.run(cmd, capture_output=True)


def run_case(lpx_bin, tmp_path, case):
    return lpx_template(lpx_bin, tmp_path, TDIR / case["template"], case["messages"],
                        case["add_generation_prompt"], case.get("bos_token"),
                        case.get("eos_token"), case.get("enable_thinking"),
                        case.get("date_string"), case.get("vars"))


@pytest.mark.parametrize("case", GOLDENS, ids=[c["id"] for c in GOLDENS])
def test_golden(lpx_bin, tmp_path, case):
    r = run_case(lpx_bin, tmp_path, case)
    if "error" in case:
        assert r.returncode == 1, r.stdout
        err = r.stderr.decode()
        assert err.startswith("lpx template: ") and case["error"] in err and err.count("\n") == 1
    else:
        assert r.returncode == 0, r.stderr.decode()
        assert r.stdout.decode() == case["expected"]


def test_goldens_cover_every_template():
    names = {c["template"] for c in GOLDENS}
    assert names == {p.name for p in TDIR.glob("*.jinja")}
    assert len(GOLDENS) >= 400


@pytest.mark.skipif(render_jinja_template is None, reason="transformers does not import")
def test_goldens_match_live_transformers():
    """The committed goldens are what the installed transformers renders now."""
    for case in GOLDENS + CONSTRUCTS:
        kwargs = dict(case.get("vars", {}))
        tools = kwargs.pop("tools", None)
        for k in ("bos_token", "eos_token", "enable_thinking", "date_string"):
            if k in case:
                kwargs[k] = case[k]
        template = case.get("template_text") or (TDIR / case["template"]).read_text()
        try:
            out = render_jinja_template(conversations=[case.get("messages", [])], tools=tools,
                                        chat_template=template,
                                        add_generation_prompt=case.get("add_generation_prompt", False),
                                        **kwargs)[0][0]
        except Exception as e:
            assert case.get("error") == str(e), case["id"]
            continue
        assert case.get("expected") == out, case["id"]


@pytest.mark.skipif(render_jinja_template is None, reason="transformers does not import")
def test_llama32_default_date_is_strftime_now(lpx_bin, tmp_path):
    """Without date_string, Llama 3.2's template prints strftime_now("%d %b %Y")."""
    template = (TDIR / "meta-llama-Llama-3.2-3B-Instruct.jinja").read_text()
    messages = [{"role": "user", "content": "What day is it?"}]
    for _ in range(3):  # a render straddling midnight is retried
        day = datetime.date.today()
        want = render_jinja_template(conversations=[messages], chat_template=template,
                                     add_generation_prompt=True,
                                     bos_token="<|begin_of_text|>")[0][0]
        r = lpx_template(lpx_bin, tmp_path, TDIR / "meta-llama-Llama-3.2-3B-Instruct.jinja",
                         messages, agp=True, bos="<|begin_of_text|>")
        if day == datetime.date.today():
            break
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == want
    assert "Today Date: " + day.strftime("%d %b %Y") in want


# Constructs outside the subset fail cleanly, naming the construct and line.
@pytest.mark.parametrize("template,needle", [
    ("hi\n{% filter upper %}x{% endfilter %}", "line 2: unsupported construct: {% filter %}"),
    ("{{ 'a' | wordwrap }}", "line 1: unsupported construct: filter 'wordwrap'"),
    ("{% raw %}x{% endraw %}", "line 1: unsupported construct: {% raw %}"),
    ("\n\n{{ x is divisible_by_seven }}", "line 3: unsupported construct: test 'divisible_by_seven'"),
    ("{% include 'x' %}", "unsupported construct: {% include %}"),
    ("{{ '%s' % 'a' }}", "unsupported construct: printf-style string formatting"),
    ("{{ messages[1:2, 0] }}", "unsupported construct: slice in a tuple subscript"),
])
def test_unsupported_construct(lpx_bin, tmp_path, template, needle):
    r = lpx_template(lpx_bin, tmp_path, template, [])
    assert r.returncode == 1
    assert needle in r.stderr.decode()


@pytest.mark.parametrize("template,needle", [
    ("{% if x %}", "expected {% endif %}"),
    ("{{ 'abc }}", "unterminated string"),
    ("{{ (1 }}", "expected"),
    ("{% endfor %}", "unexpected {% endfor %}"),
    ("{% break %}", "outside a for loop"),
    ("{{ messages.x.y }}", "'list object' has no attribute 'x'"),
    ("{{ 1 + 'a' }}", "unsupported operand"),
    ("{% for i in range(100001) %}{% endfor %}", "range too big"),
    ("{{ raise_exception('stop: ' ~ messages|length) }}", "stop: 0"),
    ("{% set ns = namespace(x='ab') %}{% for i in range(60) %}{% set ns.x = ns.x ~ ns.x %}"
     "{% endfor %}", "more than"),
    ("{% for i in range(99999) %}{% if " + "+".join(["i"] * 300) + " %}{% endif %}{% endfor %}",
     "evaluation steps"),
    ("{% for i in range(99999) %}{{ 'x' * 999 }}{% endfor %}", "output exceeds"),
])
def test_template_errors(lpx_bin, tmp_path, template, needle):
    r = lpx_template(lpx_bin, tmp_path, template, [])
    assert r.returncode == 1
    err = r.stderr.decode()
    assert needle in err and err.count("\n") == 1, err


def test_usage(lpx_bin):
    r = subprocess.run([lpx_bin, "template", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--messages" in r.stdout
    for args, msg in [(["--file"], "--file: needs a value"),
                      (["--bogus", "x"], "unknown option '--bogus' (see lpx template --help)"),
                      (["--enable-thinking"], "--enable-thinking: needs a value"),
                      (["--enable-thinking", "maybe"],
                       "--enable-thinking: expected true or false (got 'maybe')")]:
        r = subprocess.run([lpx_bin, "template", *args], capture_output=True, text=True)
        assert r.returncode == 2 and r.stdout == "" and r.stderr == f"lpx template: {msg}\n"



@pytest.mark.parametrize("case", CONSTRUCTS, ids=[c["id"] for c in CONSTRUCTS])
def test_construct(lpx_bin, tmp_path, case):
    """One construct of the subset at a time, against transformers' rendering."""
    r = lpx_template(lpx_bin, tmp_path, case["template_text"], [], extra=case["vars"])
    if "error" in case:
        assert r.returncode == 1 and case["error"] in r.stderr.decode()
    else:
        assert r.returncode == 0, r.stderr.decode()
        assert r.stdout.decode() == case["expected"]


def test_model_template_smollm2(lpx_bin, tmp_path, smollm2):
    """-m renders the GGUF's own template through lpx_chat_render: the same
    text as the committed template file, which the goldens verify."""
    case = next(c for c in GOLDENS if c["id"] == "smollm2-system_multi_turn-agp")
    mfile = tmp_path / "m.json"
    mfile.write_text(json.dumps(case["messages"]))
    r = subprocess.run([lpx_bin, "template", "-m", smollm2, "--messages", str(mfile),
                        "--add-generation-prompt"], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == case["expected"]
    gguf = pytest.importorskip("gguf")
    field = gguf.GGUFReader(smollm2).fields["tokenizer.chat_template"]
    text = bytes(field.parts[field.data[0]]).decode()
    assert text == (TDIR / "HuggingFaceTB-SmolLM2-135M-Instruct.jinja").read_text()


def test_model_without_template(lpx_bin, tmp_path):
    mfile = tmp_path / "m.json"
    mfile.write_text('[{"role": "user", "content": "hi"}]')
    r = subprocess.run([lpx_bin, "template", "-m", str(ROOT / "tests/fixtures/models/llama"),
                        "--messages", str(mfile)], capture_output=True, text=True)
    assert r.returncode == 1 and "model has no chat template" in r.stderr
    r = subprocess.run([lpx_bin, "template", "-m", "x.gguf", "--messages", str(mfile),
                        "--bos", "<s>"], capture_output=True, text=True)
    assert r.returncode == 2
    r = subprocess.run([lpx_bin, "template", "-m", "x.gguf", "--file", "t.jinja",
                        "--messages", str(mfile)], capture_output=True, text=True)
    assert r.returncode == 2


def test_model_template_gets_bos_eos(lpx_bin, tmp_path):
    """lpx_chat_render passes the model's BOS/EOS token texts: an HF directory
    with Llama 3.3's official template (as chat_template.jinja) renders as
    --file does with --bos/--eos set to the tokenizer config's tokens."""
    import shutil
    model = tmp_path / "model"
    shutil.copytree(ROOT / "tests/fixtures/model/hf-llama", model)
    tmpl = TDIR / "meta-llama-Llama-3.3-70B-Instruct.jinja"
    shutil.copy(tmpl, model / "chat_template.jinja")
    config = json.loads((model / "tokenizer_config.json").read_text())
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    mfile = tmp_path / "m.json"
    mfile.write_text(json.dumps(messages))
    r = subprocess.run([lpx_bin, "template", "-m", str(model), "--messages", str(mfile),
                        "--add-generation-prompt"], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    want = lpx_template(lpx_bin, tmp_path, tmpl, messages, agp=True, bos=config["bos_token"],
                        eos=config["eos_token"])
    assert want.returncode == 0 and r.stdout == want.stdout
    assert r.stdout.decode().startswith(config["bos_token"] + "<|start_header_id|>system")


def test_model_template_json_messages_and_tools(lpx_bin, tmp_path):
    """-m with tool calls in the messages and tools in --vars goes through
    lpx_chat_render_json and matches transformers' golden."""
    import shutil
    case = next(c for c in GOLDENS if c["id"] == "qwen3-tools-agp")
    model = tmp_path / "model"
    shutil.copytree(ROOT / "tests/fixtures/model/hf-qwen3", model)
    shutil.copy(TDIR / case["template"], model / "chat_template.jinja")
    mfile, vfile = tmp_path / "m.json", tmp_path / "v.json"
    mfile.write_text(json.dumps(case["messages"]))
    vfile.write_text(json.dumps(case["vars"]))
    r = subprocess.run([lpx_bin, "template", "-m", str(model), "--messages", str(mfile),
                        "--vars", str(vfile), "--add-generation-prompt"], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == case["expected"]

"""deploy/ checked offline (docs/deploy.md): the Kubernetes manifests against the Kubernetes
schemas (kubernetes-validate ships them; no network), the settings that must agree across
files, the Dockerfile's copies against `make bundle`'s layout, the nginx config through
`nginx -t`, and the Slurm scripts run with a fake array environment. No image is built."""
import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.30.0"  # a schema set kubernetes-validate ships; the manifests need no newer


def docs(name):
    return list(yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()))


def by_kind(name, kind):
    (d,) = [d for d in docs(name) if d["kind"] == kind]
    return d


def arg_after(args, flag):
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("name", ["serve.yaml", "batch-job.yaml", "batch-merge.yaml"])
def test_manifests_validate_against_the_schemas(name):
    for d in docs(name):
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)


def test_validation_is_not_vacuous():
    d = copy.deepcopy(by_kind("serve.yaml", "Deployment"))
    d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pathh"] = "/x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)


def test_deployment_drains_before_it_is_killed():
    d = by_kind("serve.yaml", "Deployment")
    pod = d["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    # /health is 503 while loading and draining: liveness must not use it
    assert "tcpSocket" in c["livenessProbe"]
    sleep = c["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    shutdown = float(arg_after(c["args"], "--shutdown-timeout"))
    assert pod["terminationGracePeriodSeconds"] >= float(sleep[1]) + shutdown
    assert arg_after(c["args"], "--port") == str(c["ports"][0]["containerPort"])
    assert pod["securityContext"]["runAsNonRoot"]
    svc = by_kind("serve.yaml", "Service")
    assert svc["spec"]["selector"] == d["spec"]["selector"]["matchLabels"]


def test_scaledobject_fields():
    # A KEDA CRD: kubernetes-validate has no schema for it, so its required fields are
    # checked here (keda.sh/v1alpha1: scaleTargetRef.name, triggers[].type/metadata).
    (s,) = docs("keda-scaledobject.yaml")
    assert s["apiVersion"] == "keda.sh/v1alpha1" and s["kind"] == "ScaledObject"
    assert s["spec"]["scaleTargetRef"]["name"] == by_kind("serve.yaml", "Deployment")["metadata"]["name"]
    assert 1 <= s["spec"]["minReplicaCount"] <= s["spec"]["maxReplicaCount"]
    (t,) = s["spec"]["triggers"]
    assert t["type"] == "prometheus" and float(t["metadata"]["threshold"]) > 0
    assert "lpx:num_requests_waiting" in t["metadata"]["query"]
    assert t["metadata"]["serverAddress"].startswith("http")


def test_indexed_job_shards_and_merge_agree():
    (j,) = docs("batch-job.yaml")
    (m,) = docs("batch-merge.yaml")
    n = j["spec"]["completions"]
    assert j["spec"]["completionMode"] == "Indexed"
    (c,) = j["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["/opt/lpx/lpx", "batch"]
    assert arg_after(c["args"], "--shard") == f"$(JOB_COMPLETION_INDEX)/{n}"
    assert "--resume" in c["args"]
    out = arg_after(c["args"], "-o")
    assert "$(JOB_COMPLETION_INDEX)" in out
    (mc,) = m["spec"]["template"]["spec"]["containers"]
    assert mc["command"] == ["/opt/lpx/lpx", "batch", "merge"]
    assert mc["args"][:n] == [out.replace("$(JOB_COMPLETION_INDEX)", str(k)) for k in range(n)]


def dockerfile_copies():
    """(source under the build stage's /src/build, destination) of each COPY --from=build."""
    text = (DEPLOY / "Dockerfile").read_text()
    got = re.findall(r"^COPY --from=build /src/build/(\S*) (\S+)$", text, re.M)
    assert got and len(got) == len(re.findall(r"^COPY --from=", text, re.M))
    return got


def test_bundle_layout_has_every_copied_path_and_starts(tmp_path, lpx_bin):
    # make bundle's step on a build folder holding only the binary, twice (idempotent)
    build = tmp_path / "build"
    build.mkdir()
    shutil.copy2(lpx_bin, build / "lpx")
    for _ in range(2):
        r = subprocess.run([ROOT / "scripts/bundle-libs.sh", str(build)], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
    image = tmp_path / "image"
    for src, dst in dockerfile_copies():
        path = build / src
        assert path.exists(), f"Dockerfile copies /src/build/{src}: missing after make bundle"
        target = image / dst.lstrip("/")
        if path.is_dir():
            shutil.copytree(path, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    entry = json.loads(re.search(r"^ENTRYPOINT (.*)$", (DEPLOY / "Dockerfile").read_text(),
                                 re.M).group(1))
    exe = image / entry[0].lstrip("/")
    assert entry[1:] == ["serve"] and exe.exists()
    # the copy finds its libraries through its own $ORIGIN/lib, not a library path
    env = {"PATH": "/usr/bin:/bin"}
    v = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env)
    assert v.returncode == 0 and v.stdout.startswith("lpx "), v.stderr
    # doctor exits 1 on a machine without a GPU; what matters here is that it runs
    d = subprocess.run([exe, "doctor", "--json"], capture_output=True, text=True, env=env)
    assert v.stdout.split() == ["lpx", json.loads(d.stdout)["lpx_version"]], d.stderr


def test_nginx_config_is_accepted(tmp_path):
    nginx = shutil.which("nginx") or (os.path.exists("/usr/sbin/nginx") and "/usr/sbin/nginx")
    if not nginx:
        pytest.skip("nginx is not installed (scripts/install-deps.sh --test installs nginx-light)")
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"""pid {tmp_path}/nginx.pid;
error_log {tmp_path}/error.log;
events {{}}
http {{
    access_log off;
    include {DEPLOY / "nginx/lpx-upstream.conf"};
}}
""")
    r = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(conf)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = (DEPLOY / "nginx/lpx-upstream.conf").read_text()
    assert re.search(r"proxy_next_upstream .*\bnon_idempotent\b", text)


def test_nginx_per_address_limit_is_lpxs(lpx_bin):
    """Behind nginx lpx sees one address: the config keeps lpx's per-client limit."""
    text = (DEPLOY / "nginx/lpx-upstream.conf").read_text()
    m = re.search(r"^\s*limit_conn lpx_per_ip (\d+);", text, re.M)
    h = subprocess.run([lpx_bin, "serve", "--help"], capture_output=True, text=True).stdout
    d = re.search(r"--max-connections-per-ip N\s+1 to \d+ \(default (\d+)", h)
    assert m and d and m.group(1) == d.group(1)
    assert re.search(r"^limit_conn_zone \$binary_remote_addr zone=lpx_per_ip:", text, re.M)


def test_slurm_array_then_merge(tmp_path, lpx_bin, smollm2):
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Item {i}:", "max_tokens": 1})
                           + "\n" for i in range(6)))
    env = dict(os.environ, LPX=lpx_bin, SLURM_ARRAY_TASK_COUNT="3")
    out = tmp_path / "out"
    for k in range(3):
        r = subprocess.run([DEPLOY / "slurm/lpx-batch-array.sbatch", inp, out, smollm2],
                           env=dict(env, SLURM_ARRAY_TASK_ID=str(k)), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    r = subprocess.run([DEPLOY / "slurm/lpx-batch-merge.sbatch", out, "3"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "merged" / "summary.json").read_text())
    assert (s["total"], s["succeeded"], s["failed"]) == (6, 6, 0)
    # submit.sh: the array over 0..N-1, then the merge after it, whatever its exit status
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sbatch").write_text('#!/bin/sh\necho "$@" >> "$SBATCH_LOG"\necho 4711\n')
    (fake / "sbatch").chmod(0o755)
    log = tmp_path / "sbatch.log"
    r = subprocess.run([DEPLOY / "slurm/submit.sh", "4", inp, out, smollm2], capture_output=True,
                       text=True, env=dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}",
                                           SBATCH_LOG=str(log)))
    assert r.returncode == 0, r.stderr
    a, m = log.read_text().splitlines()
    assert a.startswith("--parsable --array=0-3 ") and a.endswith(f"{inp} {out} {smollm2}")
    assert m.startswith("--parsable --dependency=afterany:4711 ") and m.endswith(f"{out} 4")


def test_image_user_matches_the_pods():
    text = (DEPLOY / "Dockerfile").read_text()
    uid, gid = re.search(r"^USER (\d+):(\d+)$", text, re.M).groups()
    assert f"--uid {uid} --gid {gid}" in text and f"--gid {gid} lpx" in text
    for name in ("serve.yaml", "batch-job.yaml", "batch-merge.yaml"):
        for d in docs(name):
            if d["kind"] in ("Deployment", "Job"):
                sc = d["spec"]["template"]["spec"]["securityContext"]
                assert (str(sc["runAsUser"]), str(sc["runAsGroup"])) == (uid, gid), name

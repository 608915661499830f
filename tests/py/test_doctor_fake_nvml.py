"""lpx doctor and lpx monitor driven through a fake NVML/libcuda (tests/fake_nvml, built
as build/libfake_nvml.so and loaded through LPX_NVML_LIBRARY / LPX_CUDA_LIBRARY): each
fault state must come out as the named check with its status and fix, and the exit
status must be the worst status (docs/doctor.md: OK 0, FAIL 1, WARN 3)."""
import json
import os
import subprocess

import pytest

from conftest import ROOT

EXIT = {"OK": 0, "FAIL": 1, "WARN": 3}


@pytest.fixture(scope="module")
def fake_lib():
    path = ROOT / os.environ.get("LPX_BUILD", "build") / "libfake_nvml.so"
    assert path.exists(), f"{path} missing: run make first"
    return str(path)


def run(lpx_bin, fake_lib, state, *args):
    env = dict(os.environ, LPX_NVML_LIBRARY=fake_lib, LPX_CUDA_LIBRARY=fake_lib,
               LPX_FAKE_NVML_STATE=state)
    return subprocess.run([lpx_bin, *args], capture_output=True, text=True, timeout=120, env=env)


def doctor(lpx_bin, fake_lib, state, *args):
    r = run(lpx_bin, fake_lib, state, "doctor", "--json", *args)
    doc = json.loads(r.stdout)
    levels = [c["level"] for c in doc["checks"]]
    worst = "FAIL" if "FAIL" in levels else "WARN" if "WARN" in levels else "OK"
    assert doc["result"] == worst
    assert r.returncode == doc["exit_status"] == EXIT[worst], r.stdout + r.stderr
    return doc, {c["id"]: c for c in doc["checks"]}


def test_healthy(lpx_bin, fake_lib):
    doc, checks = doctor(lpx_bin, fake_lib, "healthy")
    assert doc["driver"]["nvml"] and doc["driver"]["version"] == "580.159.04"
    assert doc["driver"]["cuda_device_count"] == 1
    assert checks["gpu.count"]["level"] == "OK" and checks["driver.cuda"]["level"] == "OK"
    gpu = {k: c for k, c in checks.items() if k.startswith("gpu0.")}
    assert len(gpu) == 11  # gpu0.numa among them: NUMA node 0, whose CPUs this process has
    if doc["build"]["cuda_backend"]:
        assert all(c["level"] == "OK" for c in gpu.values()), gpu
    else:  # no CUDA backend: the GPU cannot be used, everything else about it is fine
        assert checks["gpu0.arch"]["level"] == "FAIL"
        assert all(c["level"] == "OK" for k, c in gpu.items() if k != "gpu0.arch"), gpu
    assert "ECC on, no uncorrected errors" in checks["gpu0.ecc"]["found"]
    # The libraries named are the files loaded (LPX_*_LIBRARY here), not the default names.
    assert doc["driver"]["nvml_library"] == doc["driver"]["cuda_library"] == fake_lib
    assert checks["driver.nvml"]["found"].startswith(fake_lib + " loaded, driver 580.159.04")
    assert checks["driver.cuda"]["found"].startswith(fake_lib + " loaded, cuInit ok")
    assert "PCIe gen 5 x16, the maximum" in checks["gpu0.pcie"]["found"]


def test_no_gpu(lpx_bin, fake_lib):
    doc, checks = doctor(lpx_bin, fake_lib, "nogpu")
    assert doc["exit_status"] == 1 and doc["gpus"] == []
    c = checks["gpu.count"]
    assert c["level"] == "FAIL" and "reports 0 GPUs" in c["found"] and c["fix"]
    assert checks["driver.cuda"]["level"] == "FAIL"
    assert "CUDA_ERROR_NO_DEVICE" in checks["driver.cuda"]["found"]
    assert checks["cpu.backend"]["level"] == "OK"


def test_old_driver(lpx_bin, fake_lib):
    """In a CUDA build the driver is compared with lpx's toolkit; a CPU build has none, and
    says that lpx cannot use the GPU at all. tests/unit/test_doctor_fake_nvml.c runs the
    CUDA build's verdicts in every build."""
    doc, checks = doctor(lpx_bin, fake_lib, "old_driver")
    assert doc["driver"]["version"] == "470.256.02" and doc["driver"]["cuda_version"] == 11040
    assert doc["exit_status"] == 1
    if doc["build"]["cuda_backend"]:
        c = checks["driver.version"]
        assert c["level"] == "FAIL" and "supports CUDA 11.4 only" in c["found"]
        assert "install an NVIDIA driver >=" in c["fix"]
    else:
        assert "driver.version" not in checks
        c = checks["build.cuda"]
        assert c["level"] == "FAIL" and "without the CUDA backend" in c["found"]
        assert "install the CUDA toolkit" in c["fix"]


def test_cc_not_compiled(lpx_bin, fake_lib):
    doc, checks = doctor(lpx_bin, fake_lib, "cc_not_compiled")
    c = checks["gpu0.arch"]
    assert c["level"] == "FAIL" and "compute capability 3.7" in c["found"]
    if doc["build"]["cuda_backend"]:
        assert "none of which runs on sm_37" in c["found"]
        assert "-DCMAKE_CUDA_ARCHITECTURES=37" in c["fix"]
    else:
        assert "no CUDA backend" in c["found"] and "rebuild lpx" in c["fix"]
    assert doc["exit_status"] == 1


@pytest.mark.parametrize("state,check,level,found,fix", [
    ("pcie_x8", "gpu0.pcie", "WARN", "PCIe link x8 of x16 (gen 5 of 5)", "x16 slot"),
    ("thermal", "gpu0.clocks", "WARN", "clocks held down by: thermal (software)",
     "improve cooling"),
    ("thermal", "gpu0.temperature", "WARN", "84 C, within 10 C of the slowdown threshold 87 C",
     "improve cooling"),
    ("power_cap", "gpu0.power", "WARN", "power limit lowered to 300 W (default 700 W)",
     "sudo nvidia-smi -i 0 -pl 700"),
    ("power_cap", "gpu0.clocks", "WARN", "clocks held down by: power cap", "nvidia-smi -pl"),
    ("ecc_on", "gpu0.ecc", "FAIL", "2 uncorrected ECC error(s)", "reset it"),
    ("foreign_process", "gpu0.processes", "WARN", "1 other process(es) hold 19.0 GiB: 1 ",
     "stop them"),
    ("mig_on", "gpu0.mig", "WARN", "MIG on", "CUDA_VISIBLE_DEVICES=MIG-"),
])
def test_fault(lpx_bin, fake_lib, state, check, level, found, fix):
    doc, checks = doctor(lpx_bin, fake_lib, state)
    c = checks[check]
    assert c["level"] == level and found in c["found"] and fix in c["fix"], c
    # Only the faulty reading is off: in the healthy state the same check is OK.
    _, healthy = doctor(lpx_bin, fake_lib, "healthy")
    assert healthy[check]["level"] == "OK"


def test_low_memory(lpx_bin, fake_lib, smollm2):
    args = ("-m", smollm2, "--max-model-len", "8192", "--max-num-seqs", "64")
    doc, checks = doctor(lpx_bin, fake_lib, "low_memory", *args)
    c = checks["gpu0.memory"]
    assert c["level"] == "FAIL" and "only 1.0 GiB of 141.0 GiB are free" in c["found"], c
    assert "8192 tokens x 64 sequences" in c["found"]
    assert "lower --max-model-len or --max-num-seqs" in c["fix"]
    assert doc["exit_status"] == 1
    # The same model and plan fit when the GPU's memory is free.
    _, healthy = doctor(lpx_bin, fake_lib, "healthy", *args)
    assert healthy["gpu0.memory"]["level"] == "OK"


def test_no_gpu_text_says_so_plainly(lpx_bin, fake_lib):
    """The issue's no-GPU case on any machine: a plain message, the FAIL status, and the CPU
    backend reported as the fallback."""
    r = run(lpx_bin, fake_lib, "nogpu", "doctor")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert any(l.startswith("  FAIL  gpu.count ") and "no NVIDIA GPU found" in l for l in lines)
    assert any(l.startswith("  OK    cpu.backend ") and "(lpx will run there)" in l
               for l in lines)
    assert lines[-1].startswith("No NVIDIA GPU is usable here: lpx runs on its CPU backend (")


def test_monitor_without_gpu_says_so_and_exits(lpx_bin, fake_lib):
    r = run(lpx_bin, fake_lib, "nogpu", "monitor", "--count", "1")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "lpx monitor: no NVIDIA GPU to monitor (the driver reports 0 GPUs)\n"


def test_unknown_state_is_not_healthy(lpx_bin, fake_lib):
    doc, checks = doctor(lpx_bin, fake_lib, "no_such_state")
    assert checks["driver.nvml"]["level"] == "FAIL"
    assert "unknown LPX_FAKE_NVML_STATE" in checks["driver.nvml"]["found"]


def in_real_container():
    return os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")


@pytest.mark.parametrize("state,env,found,fix", [
    ("nogpu", {"NVIDIA_VISIBLE_DEVICES": "void"}, "that sees no GPU; NVIDIA_VISIBLE_DEVICES=void",
     "NVIDIA_VISIBLE_DEVICES hides every GPU"),
    ("nogpu", {}, "that sees no GPU; NVIDIA_VISIBLE_DEVICES=(unset)", "docker run --gpus all"),
    ("healthy", {"NVIDIA_DRIVER_CAPABILITIES": "utility"},
     "NVIDIA_DRIVER_CAPABILITIES=utility: without 'compute' libcuda is not mounted",
     "NVIDIA_DRIVER_CAPABILITIES=compute,utility"),
])
def test_container(lpx_bin, fake_lib, monkeypatch, state, env, found, fix):
    """Detection through KUBERNETES_SERVICE_HOST (a pod), then what the container lacks."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    for k in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    doc, checks = doctor(lpx_bin, fake_lib, state)
    c = checks["container"]
    assert doc["host"]["container"]
    if not in_real_container():  # /.dockerenv and podman's file are looked at first
        assert "in a container (kubernetes: KUBERNETES_SERVICE_HOST)" in c["found"]
    assert c["level"] == "FAIL" and found in c["found"] and fix in c["fix"], c
    monkeypatch.setenv("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    _, healthy = doctor(lpx_bin, fake_lib, "healthy")
    assert healthy["container"]["level"] == "OK"


@pytest.mark.parametrize("state,args,alert", [
    ("saturated", (), "ALERT saturated: utilisation 99% and memory 97% in use (limits 95%, 95%)"),
    ("thermal", (), "ALERT temperature 84 C at or over 82 C; throttling: thermal (software)"),
    ("thermal", ("--temp-limit", "90"), "ALERT throttling: thermal (software)"),
    ("power_cap", (), "ALERT throttling: power cap"),
    ("mem_growing", ("--growth-window", "3", "--growth-mib", "1024"),
     "ALERT memory grew 1024 MiB over the last 3 samples without falling"),
])
def test_monitor_alerts(lpx_bin, fake_lib, tmp_path, state, args, alert):
    """Each alert rule of the issue, end to end: printed in the table, logged to --log,
    on stderr with --json; and not raised by the healthy GPU."""
    log = tmp_path / "alerts.log"
    r = run(lpx_bin, fake_lib, state, "monitor", "--count", "3", "--interval", "0.05",
            "--log", str(log), *args)
    assert r.returncode == 0, r.stderr
    shown = [l for l in r.stdout.splitlines() if l.startswith("! ")]
    assert len(shown) == 1 and shown[0].endswith(" gpu0 " + alert), r.stdout
    assert log.read_text().splitlines() == shown
    r = run(lpx_bin, fake_lib, state, "monitor", "--count", "3", "--interval", "0.05", "--json",
            *args)
    assert [l for l in r.stderr.splitlines() if l.startswith("! ")][0].endswith(alert)
    # --json: the alerts holding, one text each, in a list.
    assert json.loads(r.stdout.splitlines()[-1])["alerts"] == alert.removeprefix("ALERT ").split("; ")
    r = run(lpx_bin, fake_lib, "healthy", "monitor", "--count", "3", "--interval", "0.05", *args)
    assert r.returncode == 0 and "ALERT" not in r.stdout + r.stderr


# ---- several GPUs: the topology matrix and NUMA placement through NVML ---------------

def test_topology_nvlink_pairs(lpx_bin, fake_lib):
    """4 GPUs on two sockets, NVLink pairs 0-1 and 2-3 (the fake's nvlink_pairs): the
    matrix is nvidia-smi topo -m's, each GPU's NUMA node as NVML gives it; node 1 has no
    CPUs on this machine, so its GPUs' placement is not checked (said, not guessed)."""
    doc, checks = doctor(lpx_bin, fake_lib, "nvlink_pairs")
    t = doc["topology"]
    assert t["matrix"] == [["X", "NV4", "SYS", "SYS"], ["NV4", "X", "SYS", "SYS"],
                           ["SYS", "SYS", "X", "NV4"], ["SYS", "SYS", "NV4", "X"]]
    assert t["nvlinks"][0] == [0, 4, 0, 0] and not any(any(r) for r in t["nvswitch"])
    assert t["numa_node"] == [0, 0, 1, 1]
    c = checks["gpu.topology"]
    assert c["level"] == "OK"
    assert c["found"] == ("4 GPUs: 2 of 6 pairs on NVLink, 4 across the CPUs' interconnect "
                          "(SYS): 0-1 NV4, 0-2 SYS, 0-3 SYS, 1-2 SYS, 1-3 SYS, 2-3 NV4")
    cpus = doc["host"]["cpu_affinity"]
    for i in (0, 1):
        assert checks[f"gpu{i}.numa"]["level"] == "OK"
        assert f"this process's CPUs ({cpus}) are on it" in checks[f"gpu{i}.numa"]["found"]
    for i in (2, 3):
        assert checks[f"gpu{i}.numa"] == {
            "id": f"gpu{i}.numa", "level": "OK", "fix": "",
            "found": "NUMA node 1; its CPU list is not readable here: placement not checked"}
    text = run(lpx_bin, fake_lib, "nvlink_pairs", "doctor").stdout
    assert f"topology (this process's CPUs: {cpus}):\n" in text
    assert "        GPU0   GPU1   GPU2   GPU3   NUMA\n" in text
    assert "GPU2    SYS    SYS    X      NV4    1\n" in text


def test_topology_nvswitch(lpx_bin, fake_lib):
    """An HGX board: every GPU's 18 links end at NVSwitches, so every pair is NV18."""
    doc, checks = doctor(lpx_bin, fake_lib, "nvswitch8")
    t = doc["topology"]
    assert all(t["matrix"][i][j] == ("X" if i == j else "NV18") for i in range(8) for j in range(8))
    assert all(t["nvswitch"][i][j] == (i != j) for i in range(8) for j in range(8))
    assert checks["gpu.topology"]["found"] == (
        "8 GPUs: 28 of 28 pairs on NVLink, 0 across the CPUs' interconnect (SYS): "
        "every pair NV18 (NVSwitch)")
    assert doc["driver"]["cuda_device_count"] == 8 and len(doc["gpus"]) == 8


def test_topology_pcie_without_numa(lpx_bin, fake_lib):
    """Two PCIe cards under one host bridge, a driver without the NUMA query and no sysfs
    entry for the fake bus ids: PHB, and the NUMA checks say placement is not checked."""
    doc, checks = doctor(lpx_bin, fake_lib, "pcie2")
    assert doc["topology"]["matrix"] == [["X", "PHB"], ["PHB", "X"]]
    assert doc["topology"]["numa_node"] == [None, None]
    assert checks["gpu.topology"]["found"].endswith(": 0-1 PHB")
    for i in (0, 1):
        assert checks[f"gpu{i}.numa"]["level"] == "OK"
        assert checks[f"gpu{i}.numa"]["found"].startswith("NUMA node not reported")


def test_one_gpu_topology(lpx_bin, fake_lib):
    doc, checks = doctor(lpx_bin, fake_lib, "healthy")
    assert checks["gpu.topology"]["level"] == "OK"
    assert checks["gpu.topology"]["found"] == "one GPU: no links between GPUs"
    assert doc["topology"]["matrix"] == [["X"]] and doc["topology"]["numa_node"] == [0]
    assert "topology (" not in run(lpx_bin, fake_lib, "healthy", "doctor").stdout

"""Build the replay snapshots in this folder from real command outputs.

Every value below comes from an output quoted in docs/knowledge/apple-silicon.md (and the
bug reports it cites) or from real Linux/NVIDIA machines; where one machine's outputs were not
all published, the missing ones are filled from the same chip's published specification (the
table in docs/knowledge/apple-silicon.md). Run `python tests/snapshots/build_snapshots.py` to regenerate.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
GB = 2**30


def displays(model: str, cores: int | None, name: str | None = None, vendor: str = "sppci_vendor_Apple") -> str:
    item = {"_name": name or model, "sppci_bus": "spdisplays_builtin", "sppci_device_type": "spdisplays_gpu",
            "sppci_model": model, "spdisplays_vendor": vendor, "spdisplays_mtlgpufamilysupport": "spdisplays_metal3"}
    if cores is not None:
        item["sppci_cores"] = str(cores)
    return json.dumps({"SPDisplaysDataType": [item]}, indent=2) + "\n"


def mac(*, version, build, brand, p, e, mem_gb, gpu_model, gpu_cores, py_machine="arm64", translated=0,
        torch="2.9.1", extra_packages=None, env=None, runtime=None, arm64=1, gpu_name=None, omp=None):
    cmds = {
        "sw_vers -productVersion": f"{version}\n",
        "sw_vers -buildVersion": f"{build}\n",
        "sysctl -n machdep.cpu.brand_string": f"{brand}\n",
        "sysctl -n hw.memsize": f"{mem_gb * GB}\n",
        "sysctl -n hw.physicalcpu": f"{p + e}\n",
        "system_profiler SPDisplaysDataType -json": displays(gpu_model, gpu_cores, gpu_name),
    }
    if arm64 is not None:
        cmds["sysctl -n hw.optional.arm64"] = f"{arm64}\n"
        cmds["sysctl -n sysctl.proc_translated"] = f"{translated}\n"
        cmds["sysctl -n hw.perflevel0.physicalcpu"] = f"{p}\n"
        cmds["sysctl -n hw.perflevel1.physicalcpu"] = f"{e}\n"
    else:  # Intel Macs have none of these OIDs
        for oid in ("hw.optional.arm64", "sysctl.proc_translated", "hw.perflevel0.physicalcpu", "hw.perflevel1.physicalcpu"):
            cmds[f"sysctl -n {oid}"] = {"rc": 1, "stdout": "", "stderr": f"sysctl: unknown oid '{oid}'\n"}
    packages = {"torch": torch, "torchvision": None, "torchaudio": None, "numpy": "2.1.3"}
    packages.update(extra_packages or {})
    snap = {"envkit_snapshot": 1, "system": "Darwin",
            "python": {"version": "3.12.7", "implementation": "CPython", "machine": py_machine,
                       "executable": "~/proj/.venv/bin/python", "in_venv": True},
            "commands": cmds, "files": {}, "env": env or {}, "packages": packages,
            "openmp_libs": omp if omp is not None else ["~/proj/.venv/lib/python3.12/site-packages/torch/lib/libomp.dylib"]}
    if runtime is not None:
        snap["runtime"] = runtime
    return snap


def linux(*, os_release, cpu_model, vendor_id, cores, mem_kb, smi, torch, runtime=None, packages=None, env=None, omp=None,
          python="3.11.9"):
    cpuinfo = "".join(
        f"processor\t: {i}\nvendor_id\t: {vendor_id}\nmodel name\t: {cpu_model}\nphysical id\t: 0\ncore id\t\t: {i}\n\n"
        for i in range(cores))
    cmds = {}
    if smi is not None:
        cmds["nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader,nounits"] = smi
    pk = {"torch": torch, "torchvision": None, "torchaudio": None, "numpy": "2.2.6"}
    pk.update(packages or {})
    snap = {"envkit_snapshot": 1, "system": "Linux",
            "python": {"version": python, "implementation": "CPython", "machine": "x86_64",
                       "executable": "~/proj/.venv/bin/python", "in_venv": True},
            "commands": cmds,
            "files": {"/etc/os-release": os_release, "/proc/cpuinfo": cpuinfo,
                      "/proc/meminfo": f"MemTotal:       {mem_kb} kB\nMemFree:        {mem_kb // 2} kB\n"},
            "env": env or {}, "packages": pk,
            "openmp_libs": omp if omp is not None else ["~/proj/.venv/lib/python3.11/site-packages/torch/lib/libgomp.so.1"]}
    if runtime is not None:
        snap["runtime"] = runtime
    return snap


UBUNTU = 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n'
MPS_RUNTIME = {"ok": True, "mps_built": True, "mps_available": True, "mps_bf16": True, "cuda_built": False,
               "cuda_available": False, "device_count": 0, "devices": [], "cudnn_version": None}

SNAPSHOTS = {
    # Early Big Sur on an M1: generic brand string, GPU entry named by its localisation key (archspec#38, exelban/stats#394).
    "m1_bigsur_generic": mac(version="11.2.3", build="20D91", brand="Apple processor", p=4, e=4, mem_gb=16,
                             gpu_model="Apple M1", gpu_cores=8, gpu_name="kHW_AppleM1Item", torch="2.2.2"),
    # M1 Pro (cpufetch#139: 8P+2E) on macOS 12.7.6 (pytorch#139425) with torch 2.5.1: MPS needs 13.0.
    "m1_pro_macos12": mac(version="12.7.6", build="21H1320", brand="Apple M1 Pro", p=8, e=2, mem_gb=16,
                          gpu_model="Apple M1 Pro", gpu_cores=16, torch="2.5.1"),
    # M1 Max with a second OpenMP runtime (pytorch#78490) and the KMP_DUPLICATE_LIB_OK export common
    # MPS recipes carry (docs/knowledge/common-guides.md).
    "m1_max_openmp_clash": mac(version="14.7.1", build="23H222", brand="Apple M1 Max", p=8, e=2, mem_gb=64,
                               gpu_model="Apple M1 Max", gpu_cores=32, torch="2.6.0",
                               env={"KMP_DUPLICATE_LIB_OK": "TRUE", "PYTORCH_ENABLE_MPS_FALLBACK": "1"},
                               omp=["~/proj/.venv/lib/python3.12/site-packages/torch/lib/libomp.dylib",
                                    "~/proj/.venv/lib/python3.12/site-packages/faiss/.dylibs/libomp.dylib"]),
    "m1_ultra": mac(version="14.6.1", build="23G93", brand="Apple M1 Ultra", p=16, e=4, mem_gb=128,
                    gpu_model="Apple M1 Ultra", gpu_cores=64, torch="2.9.1", env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),
    "m2_base": mac(version="14.4", build="23E214", brand="Apple M2", p=4, e=4, mem_gb=24, gpu_model="Apple M2",
                   gpu_cores=10, torch="2.7.1"),
    # collect_env of a native M2 Max on macOS 13.7.4 (pytorch#164943).
    "m2_max_macos13": mac(version="13.7.4", build="22H420", brand="Apple M2 Max", p=8, e=4, mem_gb=64,
                          gpu_model="Apple M2 Max", gpu_cores=38, torch="2.8.0",
                          extra_packages={"torchvision": "0.23.0", "torchaudio": "2.8.0"},
                          env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),
    # M2 Pro under Rosetta on macOS 15.3 (pytorch#146236): x86_64 Python, sw_vers compatibility 10.16.
    "m2_pro_rosetta": mac(version="10.16", build="24D60", brand="Apple M2 Pro", p=8, e=4, mem_gb=16,
                          gpu_model="Apple M2 Pro", gpu_cores=19, py_machine="x86_64", translated=0, torch="2.2.2",
                          env={"SYSTEM_VERSION_COMPAT": "1"}),
    # M2 Ultra (llama.cpp PR #1642): 16P+8E, 76 GPU cores, 192 GB.
    "m2_ultra": mac(version="14.5", build="23F79", brand="Apple M2 Ultra", p=16, e=8, mem_gb=192,
                    gpu_model="Apple M2 Ultra", gpu_cores=76, torch="2.9.1", env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),
    # M3 (narugit/smctemp#26: 10-core GPU) on macOS 15.1.
    "m3_base": mac(version="15.1", build="24B83", brand="Apple M3", p=4, e=4, mem_gb=16, gpu_model="Apple M3",
                   gpu_cores=10, torch="2.10.0"),
    "m3_pro": mac(version="15.2", build="24C101", brand="Apple M3 Pro", p=6, e=6, mem_gb=36, gpu_model="Apple M3 Pro",
                  gpu_cores=18, torch="2.9.1", env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),
    # M3 Max with the environment common guides export (docs/knowledge/common-guides.md): a typo and the 0.0 watermark.
    "m3_max_macos14": mac(version="14.5", build="23F79", brand="Apple M3 Max", p=12, e=4, mem_gb=128,
                          gpu_model="Apple M3 Max", gpu_cores=40, torch="2.9.1",
                          env={"PYTORCH_ENABLE_MPS_FALLBACK": "1", "PYTORCH_MPS_HIGH_WATERMARK_RATION": "0.8",
                               "HF_TOKEN": "hf_secret_never_recorded"},
                          runtime=dict(MPS_RUNTIME, torch_version="2.9.1")),
    "m3_ultra": mac(version="15.4", build="24E248", brand="Apple M3 Ultra", p=24, e=8, mem_gb=512,
                    gpu_model="Apple M3 Ultra", gpu_cores=80, torch="2.10.0", env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),
    "m4_base": mac(version="15.3", build="24D60", brand="Apple M4", p=4, e=6, mem_gb=16, gpu_model="Apple M4",
                   gpu_cores=10, torch="2.11.0", env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),
    # M4 Pro on a nightly.
    "m4_pro_nightly": mac(version="15.4.1", build="24E263", brand="Apple M4 Pro", p=10, e=4, mem_gb=48,
                          gpu_model="Apple M4 Pro", gpu_cores=20, torch="2.11.0.dev20251201",
                          env={"PYTORCH_ENABLE_MPS_FALLBACK": "1", "PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0"}),
    "m4_max_tahoe": mac(version="26.1", build="25B78", brand="Apple M4 Max", p=12, e=4, mem_gb=128,
                        gpu_model="Apple M4 Max", gpu_cores=40, torch="2.13.0",
                        extra_packages={"torchvision": "0.28.0", "torchaudio": "2.11.0"},  # torchaudio's last release
                        env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),
    # M5 Max (exelban/stats#3047: 6 super + 12 performance cores, 40 GPU cores): not in envkit's tables.
    "m5_max_unknown": mac(version="26.2", build="25C56", brand="Apple M5 Max", p=6, e=12, mem_gb=128,
                          gpu_model="Apple M5 Max", gpu_cores=40, torch="2.13.0", env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"}),
    # Intel Mac (ashfurrow/xcode-hardware-performance#121), torch stops at 2.2.2 (pytorch#114602).
    "intel_mac": mac(version="12.7.6", build="21H1320", brand="Intel(R) Core(TM) i7-3820QM CPU @ 2.70GHz", p=4, e=0,
                     mem_gb=16, gpu_model="Intel HD Graphics 4000", gpu_cores=None, py_machine="x86_64", torch="2.2.2",
                     arm64=None, omp=[]),
    # Linux, two H100s, recent driver, CUDA 12.4 build, runtime recorded.
    "linux_h100": linux(os_release=UBUNTU, cpu_model="Intel(R) Xeon(R) Platinum 8480+", vendor_id="GenuineIntel", cores=16,
                        mem_kb=2113396736,
                        smi="NVIDIA H100 80GB HBM3, 81559, 550.54.15, 9.0\nNVIDIA H100 80GB HBM3, 81559, 550.54.15, 9.0\n",
                        torch="2.5.1+cu124",
                        runtime={"ok": True, "torch_version": "2.5.1+cu124", "mps_built": False, "mps_available": False,
                                 "cuda_built": True, "cuda_version": "12.4", "cuda_available": True, "device_count": 2,
                                 "devices": [{"name": "NVIDIA H100 80GB HBM3", "capability": "9.0", "memory_bytes": 85520809984}] * 2,
                                 "cuda_bf16": True, "cudnn_version": 90100}),
    # An RTX 3090 with an old 470 driver and a CUDA 12.4 build: the driver is too old.
    "linux_old_driver": linux(os_release=UBUNTU, cpu_model="AMD Ryzen 9 5950X 16-Core Processor", vendor_id="AuthenticAMD",
                              cores=16, mem_kb=65755764, smi="NVIDIA GeForce RTX 3090, 24576, 470.182.03, 8.6\n",
                              torch="2.6.0+cu124"),
    # A100 box with the CPU build of torch installed by `pip install torch --index-url .../cpu`.
    "linux_a100_cpu_torch": linux(os_release=UBUNTU, cpu_model="AMD EPYC 7763 64-Core Processor", vendor_id="AuthenticAMD",
                                  cores=32, mem_kb=528262836, smi="NVIDIA A100-SXM4-80GB, 81920, 535.183.01, 8.0\n",
                                  torch="2.7.1+cpu"),
    # RTX 5090 (Blackwell sm_120) with a cu126 build.
    "linux_rtx5090_cu126": linux(os_release=UBUNTU, cpu_model="AMD Ryzen 9 9950X 16-Core Processor", vendor_id="AuthenticAMD",
                                 cores=16, mem_kb=98000000, smi="NVIDIA GeForce RTX 5090, 32607, 570.133.07, 12.0\n",
                                 torch="2.7.0+cu126"),
    # GTX 1080 Ti (Pascal sm_61) on a 580 driver with a cu128 build of 2.8: "no kernel image is
    # available" (pytorch#157517, Whisper-WebUI#653). The runtime recorded torch's own arch list.
    "linux_gtx1080ti_cu128": linux(os_release=UBUNTU, cpu_model="Intel(R) Core(TM) i7-8700K CPU @ 3.70GHz", vendor_id="GenuineIntel",
                                   cores=6, mem_kb=32768000, smi="NVIDIA GeForce GTX 1080 Ti, 11264, 580.95.05, 6.1\n",
                                   torch="2.8.0+cu128",
                                   runtime={"ok": True, "torch_version": "2.8.0+cu128", "mps_built": False, "mps_available": False,
                                            "cuda_built": True, "cuda_version": "12.8", "cuda_available": True, "device_count": 1,
                                            "devices": [{"name": "NVIDIA GeForce GTX 1080 Ti", "capability": "6.1", "memory_bytes": 11711807488}],
                                            "cuda_bf16": False, "cudnn_version": 91002,
                                            "arch_list": ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]}),
    # H100 PCIe on a 570 driver (CUDA 12.8), torch not yet installed: 2.12+ ship no cu128 build.
    "linux_h100_driver570": linux(os_release=UBUNTU, cpu_model="AMD EPYC 9454 48-Core Processor", vendor_id="AuthenticAMD", cores=16,
                                  mem_kb=1056698368, smi="NVIDIA H100 PCIe, 81559, 570.86.15, 9.0\n", torch=None),
    # A T4 (Turing sm_75, no bf16 tensor cores) on Python 3.9 with torch 2.8: torch.cuda.is_bf16_supported()
    # answers True there (emulated: pytorch PR #148322; a real T4 in MakazhanAlpamys/Soup#387), and torch 2.9+ has no Python 3.9 wheels.
    "linux_t4_py39": linux(os_release=UBUNTU, cpu_model="Intel(R) Xeon(R) CPU @ 2.20GHz", vendor_id="GenuineIntel", cores=4,
                           mem_kb=15360000, smi="Tesla T4, 15360, 535.104.05, 7.5\n", torch="2.8.0+cu126", python="3.9.18",
                           runtime={"ok": True, "torch_version": "2.8.0+cu126", "mps_built": False, "mps_available": False,
                                    "cuda_built": True, "cuda_version": "12.6", "cuda_available": True, "device_count": 1,
                                    "devices": [{"name": "Tesla T4", "capability": "7.5", "memory_bytes": 15828320256}],
                                    "cuda_bf16": True, "cudnn_version": 91002,
                                    "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]}),
    # No GPU, torchvision from another torch release.
    "linux_no_gpu": linux(os_release='PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n',
                          cpu_model="Intel(R) Xeon(R) Processor", vendor_id="GenuineIntel", cores=2, mem_kb=24600000,
                          smi=None, torch="2.13.0+cpu", packages={"torchvision": "0.20.1"}),
}

# Garbled outputs: every probe answers nonsense or fails. Doctor must say "unknown", not crash.
GARBLED = {
    "envkit_snapshot": 1, "system": "Darwin",
    "python": {"version": "3.12.1", "implementation": "CPython", "machine": "arm64", "executable": "~/x/bin/python"},
    "commands": {
        "sw_vers -productVersion": "ProductVersion: ???\n",
        "sw_vers -buildVersion": {"rc": 1, "stdout": "", "stderr": "sw_vers: error\n"},
        "sysctl -n machdep.cpu.brand_string": "\x00\x01garbage\n",
        "sysctl -n hw.memsize": "lots\n",
        "sysctl -n hw.optional.arm64": "maybe\n",
        "sysctl -n hw.perflevel0.physicalcpu": "-\n",
        "system_profiler SPDisplaysDataType -json": "{not json",
    },
    "files": {}, "env": {}, "packages": {"torch": "not-a-version"},
}


def main() -> None:
    for name, snap in {**SNAPSHOTS, "garbled_mac": GARBLED}.items():
        snap["env"] = {k: v for k, v in snap["env"].items() if not any(w in k for w in ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL"))} \
            if name != "m3_max_macos14" else snap["env"]
        (HERE / f"{name}.json").write_text(json.dumps(snap, indent=2) + "\n")
    print(f"wrote {len(SNAPSHOTS) + 1} snapshots to {HERE}")


if __name__ == "__main__":
    main()

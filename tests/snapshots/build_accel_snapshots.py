"""Build the AMD (ROCm) and Intel (XPU) replay snapshots in this folder, the way build_snapshots.py
builds the others (its `linux()` helper makes the machine around the GPU tools' outputs).

The GPU tools' outputs are recorded as public bug reports quote them, trimmed to the lines envkit
reads (each agent's own keys; the pools and ISA sections are left out):
  rocminfo, RX 7900 XTX (gfx1100) beside a Ryzen 9 5900X: ROCm/legacy-rocm-build#3214
      (the CPU agent verbatim; the GPU agent in the same layout as the GPU agents of
      pytorch/pytorch#103973 (Radeon VII, gfx906) and robertrosenbusch/gfx803_rocm#13 (RX 590))
  rocminfo, Radeon RX 590 (gfx803): robertrosenbusch/gfx803_rocm#13
  amd-smi static, Instinct MI350X (gfx950): ROCm/rocm-systems#2987 (its ASIC and DRIVER sections,
      which is what `amd-smi static --asic --driver` prints; the serial was redacted there)
  xpu-smi discovery -d 0, Intel Arc A770: ggml-org/llama.cpp#28725
  sycl-ls level_zero line: the format of intel/llvm's sycl-ls as quoted in leejet/stable-diffusion.cpp#330
      and ggml-org/llama.cpp's SYCL docs, with the A770's name
Nothing here was recorded on AMD or Intel GPU hardware by envkit's authors (README says so).
Run `python tests/snapshots/build_accel_snapshots.py` to regenerate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from build_snapshots import UBUNTU, linux  # noqa: E402

ROCMINFO_HEAD = """ROCk module is loaded
=====================    
HSA System Attributes    
=====================    
Runtime Version:         1.14
Runtime Ext Version:     1.6
System Timestamp Freq.:  1000.000000MHz
Sig. Max Wait Duration:  18446744073709551615 (0xFFFFFFFFFFFFFFFF) (timestamp count)
Machine Model:           LARGE                              
System Endianness:       LITTLE                             
Mwaitx:                  DISABLED
DMAbuf Support:          YES

==========               
HSA Agents               
==========               
"""


def agent(n: int, name: str, marketing: str, vendor: str, device_type: str, uuid: str, isa: str | None = None) -> str:
    text = (f"*******                  \nAgent {n}                  \n*******                  \n"
            f"  Name:                    {name:<35}\n  Uuid:                    {uuid:<35}\n"
            f"  Marketing Name:          {marketing:<35}\n  Vendor Name:             {vendor:<35}\n"
            f"  Feature:                 {'KERNEL_DISPATCH' if device_type == 'GPU' else 'None specified':<35}\n"
            f"  Profile:                 {'BASE_PROFILE' if device_type == 'GPU' else 'FULL_PROFILE':<35}\n"
            f"  Float Round Mode:        NEAR                               \n"
            f"  Device Type:             {device_type:<35}\n")
    if isa:
        text += f"  ISA Info:                \n    ISA 1                    \n      Name:                    amdgcn-amd-amdhsa--{isa:<10}\n"
    return text


def rocminfo(cpu: str, gpu_arch: str, gpu_name: str) -> str:
    return (ROCMINFO_HEAD + agent(1, cpu, cpu, "CPU", "CPU", "CPU-XX")
            + agent(2, gpu_arch, gpu_name, "AMD", "GPU", "GPU-XX", isa=gpu_arch) + "*** Done ***             \n")


AMD_SMI_MI350X = """GPU: 0
    ASIC:
        MARKET_NAME: AMD Instinct MI350X
        VENDOR_ID: 0x1002
        VENDOR_NAME: Advanced Micro Devices Inc. [AMD/ATI]
        SUBVENDOR_ID: 0x1002
        DEVICE_ID: 0x75a0
        SUBSYSTEM_ID: 0x75a0
        REV_ID: 0x00
        ASIC_SERIAL: <redacted>
        OAM_ID: 6
        NUM_COMPUTE_UNITS: 128
        TARGET_GRAPHICS_VERSION: gfx950
        FLAGS: 16
    DRIVER:
        NAME: amdgpu
        VERSION: 6.18.3
        OS_KERNEL_VERSION: 5.15.0-164-generic
"""

XPU_SMI = """                                                                  
  Device ID     Device Information                                
  0             Device Type: Discrete GPU                         
                Device Name: Intel(R) Arc(TM) A770 Graphics       
                Device State: normal                              
                PCI Device ID: 0x56a0                             
                Vendor Name: Intel(R) Corporation                 
                SOC UUID: 00000000-0000-0003-0000-000856a08086    
                Serial Number: unknown                            
                Core Clock Rate: 2400 MHz                         
                Stepping: A0                                      
                SKU Type: Production ES                           
                                                                  
                Driver Version: 17013219                          
                Kernel Version: 6.17.0-35-generic                 
                GFX Firmware Name: GFX                            
                GFX Firmware Version: DG02_1.3253                 
                GFX Firmware Status: normal                       
"""

SYCL_LS = ("[level_zero:gpu][level_zero:0] Intel(R) oneAPI Unified Runtime over Level-Zero, Intel(R) Arc(TM) A770 Graphics 12.55.8 [1.6.33578]\n"
           "[opencl:cpu][opencl:0] Intel(R) OpenCL, 13th Gen Intel(R) Core(TM) i7-13700K OpenCL 3.0 (Build 0) [2024.18.7.0.11_160000]\n")


def amd_machine(*, cpu, cores, gpu_arch, gpu_name, rocm, torch, runtime=None):
    snap = linux(os_release=UBUNTU, cpu_model=cpu, vendor_id="AuthenticAMD", cores=cores, mem_kb=65755764, smi=None,
                 torch=torch, runtime=runtime)
    snap["commands"]["rocminfo"] = rocminfo(cpu, gpu_arch, gpu_name)
    snap["files"]["/opt/rocm/.info/version"] = f"{rocm}\n"
    return snap


def intel_machine(*, torch):
    snap = linux(os_release=UBUNTU, cpu_model="13th Gen Intel(R) Core(TM) i7-13700K", vendor_id="GenuineIntel", cores=16,
                 mem_kb=32600000, smi=None, torch=torch)
    snap["commands"]["xpu-smi discovery"] = XPU_SMI
    snap["commands"]["sycl-ls"] = SYCL_LS
    return snap


def _with_amd_smi(snap):
    snap["commands"]["amd-smi static --asic --driver"] = AMD_SMI_MI350X
    snap["files"]["/opt/rocm/.info/version"] = "7.0.2-56\n"
    return snap


SNAPSHOTS = {
    "linux_rocm_rx7900xtx": amd_machine(cpu="AMD Ryzen 9 5900X 12-Core Processor", cores=12, gpu_arch="gfx1100",
                                        gpu_name="Radeon RX 7900 XTX", rocm="6.4.1-83", torch="2.9.1+rocm6.4"),
    "linux_rocm_rx590": amd_machine(cpu="AMD Ryzen 7 2700X Eight-Core Processor", cores=8, gpu_arch="gfx803",
                                    gpu_name="Radeon RX 590 Series", rocm="6.3.1-48", torch="2.8.0+cpu"),
    "linux_xpu_arc_a770": intel_machine(torch="2.9.1+cpu"),
    "linux_rocm_mi350x": _with_amd_smi(linux(os_release=UBUNTU, cpu_model="AMD EPYC 9575F 64-Core Processor", vendor_id="AuthenticAMD",
                                             cores=64, mem_kb=2113000000, smi=None, torch=None)),
}


def main() -> None:
    for name, snap in SNAPSHOTS.items():
        (HERE / f"{name}.json").write_text(json.dumps(snap, indent=2) + "\n")
    print(f"wrote {len(SNAPSHOTS)} snapshots to {HERE}")


if __name__ == "__main__":
    main()

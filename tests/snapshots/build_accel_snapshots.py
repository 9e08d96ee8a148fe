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
Three more hold published outputs whole, not trimmed (each snapshot's "sources" key names its page):
  rocminfo, 4 x AMD Instinct MI300X (gfx942) beside two EPYC 9474F: thamada/nvidia-smi (see mi300x_x4)
  xpu-smi discovery, 6 x Intel Data Center GPU Max 1550 of an Aurora node: argonne-lcf/user-guides
  sycl-ls, 2 Level Zero Max 1550 devices beside a Xeon 8360Y: oneapi-src/oneAPI-samples
Nothing here was recorded on AMD or Intel GPU hardware by envkit's authors (README says so).
Run `python tests/snapshots/build_accel_snapshots.py` to regenerate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from build_snapshots import UBUNTU, linux  # noqa: E402 - importable only once this folder is on sys.path (the line above)

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
"""  # noqa: W291 - rocminfo as recorded: its trailing spaces are part of the output the parser reads


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
"""  # noqa: W291, W293 - xpu-smi as recorded, padded to its table width

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


# --------------------------------------------------------------------------- 4 x MI300X (rocminfo)
# `rocminfo` of a node with two AMD EPYC 9474F and four AMD Instinct MI300X, as published in
# thamada/nvidia-smi, nvsim/MI300X_x4_rocminfo.py at commit a296cf1dff865bac1d5fd7ba38789570cab4a8da
# (https://github.com/thamada/nvidia-smi/blob/a296cf1dff865bac1d5fd7ba38789570cab4a8da/nvsim/MI300X_x4_rocminfo.py;
# its rocm-smi output of the same node, nvsim/MI300X_x4_smi.py, lists the four 0x74a1 devices with
# the same unique ids). The agents repeat line for line but for the values in MI300X_AGENTS /
# EPYC_AGENTS, so the output is written out from one agent of each kind: the text below is that
# output byte for byte (trailing blanks included; rocminfo pads keys to 25 and values to 35 columns).
def _row(indent: int, key: str, value: str | None = None) -> str:
    return " " * indent + key.ljust(25) + ("" if value is None else value.ljust(35)) + "\n"


def _pool(indent: int, n: int, segment: str, size: str, alloc: str, granule: str, align: str, all_: str, rec: str | None = None) -> str:
    text = _row(indent, f"Pool {n}") + _row(indent + 2, "Segment:", segment) + _row(indent + 2, "Size:", size)
    text += _row(indent + 2, "Allocatable:", alloc) + _row(indent + 2, "Alloc Granule:", granule)
    if rec is not None:
        text += _row(indent + 2, "Alloc Recommended Granule:", rec)
    return text + _row(indent + 2, "Alloc Alignment:", align) + _row(indent + 2, "Accessible by all:", all_)


def _dims(indent: int, value: str) -> str:
    return "".join(_row(indent, axis, value) for axis in "xyz")


ROCMINFO_MI300X_HEAD = ("ROCk module is loaded\n" + "=" * 21 + "    \n" + "HSA System Attributes    \n" + "=" * 21 + "    \n"
                        "Runtime Version:         1.1\nSystem Timestamp Freq.:  1000.000000MHz\n"
                        "Sig. Max Wait Duration:  18446744073709551615 (0xFFFFFFFFFFFFFFFF) (timestamp count)\n"
                        + _row(0, "Machine Model:", "LARGE") + _row(0, "System Endianness:", "LITTLE")
                        + "Mwaitx:                  DISABLED\nDMAbuf Support:          YES\n\n"
                        + _row(0, "=" * 10) + _row(0, "HSA Agents") + _row(0, "=" * 10))
EPYC_AGENTS = [(1, 0, "1188729676(0x46da934c) KB"), (2, 1, "1188954608(0x46de01f0) KB")]  # agent, node, pool size
MI300X_AGENTS = [(3, "GPU-8d1457e2c20f59d2", 2, "9728"), (4, "GPU-b4fa34630e85d42a", 3, "17920"),
                 (5, "GPU-e8986800e182538a", 4, "25856"), (6, "GPU-eff71edc82169115", 5, "34048")]  # agent, uuid, node, BDFID


def _agent_head(n: int) -> str:
    return _row(0, "*******") + _row(0, f"Agent {n}") + _row(0, "*******")


def _epyc_agent(n: int, node: int, size: str) -> str:
    cpu = "AMD EPYC 9474F 48-Core Processor"
    text = _agent_head(n) + _row(2, "Name:", cpu) + _row(2, "Uuid:", "CPU-XX") + _row(2, "Marketing Name:", cpu)
    for key, value in (("Vendor Name:", "CPU"), ("Feature:", "None specified"), ("Profile:", "FULL_PROFILE"),
                       ("Float Round Mode:", "NEAR"), ("Max Queue Number:", "0(0x0)"), ("Queue Min Size:", "0(0x0)"),
                       ("Queue Max Size:", "0(0x0)"), ("Queue Type:", "MULTI"), ("Node:", str(node)), ("Device Type:", "CPU")):
        text += _row(2, key, value)
    text += _row(2, "Cache Info:") + _row(4, "L1:", "32768(0x8000) KB")
    for key, value in (("Chip ID:", "0(0x0)"), ("ASIC Revision:", "0(0x0)"), ("Cacheline Size:", "64(0x40)"),
                       ("Max Clock Freq. (MHz):", "3600"), ("BDFID:", "0"), ("Internal Node ID:", str(node)),
                       ("Compute Unit:", "96"), ("SIMDs per CU:", "0"), ("Shader Engines:", "0"),
                       ("Shader Arrs. per Eng.:", "0"), ("WatchPts on Addr. Ranges:", "1")):
        text += _row(2, key, value)
    text += "  Features:                None\n" + _row(2, "Pool Info:")
    for i, seg in enumerate(("GLOBAL; FLAGS: FINE GRAINED", "GLOBAL; FLAGS: KERNARG, FINE GRAINED", "GLOBAL; FLAGS: COARSE GRAINED"), 1):
        text += _pool(4, i, seg, size, "TRUE", "4KB", "4KB", "TRUE")
    return text + _row(2, "ISA Info:")


def _mi300x_agent(n: int, uuid: str, node: int, bdfid: str) -> str:
    text = _agent_head(n)
    for key, value in (("Name:", "gfx942"), ("Uuid:", uuid), ("Marketing Name:", "AMD Instinct MI300X"), ("Vendor Name:", "AMD"),
                       ("Feature:", "KERNEL_DISPATCH"), ("Profile:", "BASE_PROFILE"), ("Float Round Mode:", "NEAR"),
                       ("Max Queue Number:", "128(0x80)"), ("Queue Min Size:", "64(0x40)"), ("Queue Max Size:", "131072(0x20000)"),
                       ("Queue Type:", "MULTI"), ("Node:", str(node)), ("Device Type:", "GPU")):
        text += _row(2, key, value)
    text += _row(2, "Cache Info:") + _row(4, "L1:", "32(0x20) KB") + _row(4, "L2:", "32768(0x8000) KB") + _row(4, "L3:", "262144(0x40000) KB")
    for key, value in (("Chip ID:", "29857(0x74a1)"), ("ASIC Revision:", "1(0x1)"), ("Cacheline Size:", "64(0x40)"),
                       ("Max Clock Freq. (MHz):", "2100"), ("BDFID:", bdfid), ("Internal Node ID:", str(node)),
                       ("Compute Unit:", "304"), ("SIMDs per CU:", "4"), ("Shader Engines:", "32"), ("Shader Arrs. per Eng.:", "1"),
                       ("WatchPts on Addr. Ranges:", "4"), ("Coherent Host Access:", "FALSE")):
        text += _row(2, key, value)
    text += "  Features:                KERNEL_DISPATCH \n" + _row(2, "Fast F16 Operation:", "TRUE") + _row(2, "Wavefront Size:", "64(0x40)")
    text += _row(2, "Workgroup Max Size:", "1024(0x400)") + "  Workgroup Max Size per Dimension:\n" + _dims(4, "1024(0x400)")
    text += _row(2, "Max Waves Per CU:", "32(0x20)") + _row(2, "Max Work-item Per CU:", "2048(0x800)")
    text += _row(2, "Grid Max Size:", "4294967295(0xffffffff)") + "  Grid Max Size per Dimension:\n" + _dims(4, "4294967295(0xffffffff)")
    text += _row(2, "Max fbarriers/Workgrp:", "32") + _row(2, "Packet Processor uCode::", "138") + _row(2, "SDMA engine uCode::", "19")
    text += _row(2, "IOMMU Support::", "None") + _row(2, "Pool Info:")
    for i, seg in enumerate(("GLOBAL; FLAGS: COARSE GRAINED", "GLOBAL; FLAGS: EXTENDED FINE GRAINED", "GLOBAL; FLAGS: FINE GRAINED"), 1):
        text += _pool(4, i, seg, "201310208(0xbffc000) KB", "TRUE", "4KB", "4KB", "FALSE")
    text += _pool(4, 4, "GROUP", "64(0x40) KB", "FALSE", "0KB", "0KB", "FALSE")
    text += _row(2, "ISA Info:") + _row(4, "ISA 1") + _row(6, "Name:", "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-")
    text += _row(6, "Machine Models:", "HSA_MACHINE_MODEL_LARGE") + _row(6, "Profiles:", "HSA_PROFILE_BASE")
    text += _row(6, "Default Rounding Mode:", "NEAR") * 2 + _row(6, "Fast f16:", "TRUE")
    text += _row(6, "Workgroup Max Size:", "1024(0x400)") + "      Workgroup Max Size per Dimension:\n" + _dims(8, "1024(0x400)")
    text += _row(6, "Grid Max Size:", "4294967295(0xffffffff)") + "      Grid Max Size per Dimension:\n" + _dims(8, "4294967295(0xffffffff)")
    return text + _row(6, "FBarrier Max Size:", "32")


ROCMINFO_MI300X_X4 = (ROCMINFO_MI300X_HEAD + "".join(_epyc_agent(*a) for a in EPYC_AGENTS)
                      + "".join(_mi300x_agent(*a) for a in MI300X_AGENTS) + _row(0, "*** Done ***"))


# --------------------------------------------------------------------------- Intel Data Center GPU Max 1550
# `xpu-smi discovery` on an Aurora compute node (six Max 1550), as the ALCF user guide prints it:
# argonne-lcf/user-guides, docs/aurora/performance-tools/xpu-smi.md at commit 389982dc83ca102cef1c82aedba0663c8bc1cc76
# (https://github.com/argonne-lcf/user-guides/blob/389982dc83ca102cef1c82aedba0663c8bc1cc76/docs/aurora/performance-tools/xpu-smi.md),
# its rows written out from the values below (the table is 100 columns: "| " id to 10, "| " text to 85, "|").
AURORA_XPU = [("926a-83c28645e226", "0000:18:00.0"), ("41ba-014c9029529c", "0000:42:00.0"), ("ef03-1b4749c20cb0", "0000:6c:00.0"),
              ("a9e9-a41ad019b491", "0001:18:00.0"), ("1198-22ef5c1e3288", "0001:42:00.0"), ("cec2-eaa8508708c5", "0001:6c:00.0")]


def _xpu_table(devices) -> str:
    border = "+" + "-" * 11 + "+" + "-" * 86 + "+\n"

    def row(left: str, text: str) -> str:
        return "| " + left.ljust(10) + "| " + text.ljust(85) + "|\n"

    out = border + row("Device ID", "Device Information") + border
    for i, (uuid, bdf) in enumerate(devices):
        out += row(str(i), "Device Name: Intel(R) Data Center GPU Max 1550") + row("", "Vendor Name: Intel(R) Corporation")
        out += row("", f"SOC UUID: 00000000-0000-0000-{uuid}") + row("", f"PCI BDF Address: {bdf}")
        out += row("", f"DRM Device: /dev/dri/card{i}") + row("", "Function Type: physical") + border
    return out


XPU_SMI_AURORA = _xpu_table(AURORA_XPU)

# `sycl-ls` on a node with an Intel Xeon Platinum 8360Y and Max 1550 GPUs (two Level Zero devices),
# from oneapi-src/oneAPI-samples, Tools/ApplicationDebugger/guided_matrix_mult_InvalidContexts/README.md
# at commit 27f723f0ddfbd0fc3f081ade896eadf405b7c31e
# (https://github.com/oneapi-src/oneAPI-samples/blob/27f723f0ddfbd0fc3f081ade896eadf405b7c31e/Tools/ApplicationDebugger/guided_matrix_mult_InvalidContexts/README.md),
# less the README's three-space indent of its code block.
SYCL_LS_MAX1550 = (
    "[opencl:cpu][opencl:0] Intel(R) OpenCL, Intel(R) Xeon(R) Platinum 8360Y CPU @ 2.40GHz OpenCL 3.0 (Build 0) [2024.18.6.0.02_160000]\n"
    "[opencl:gpu][opencl:1] Intel(R) OpenCL Graphics, Intel(R) Data Center GPU Max 1550 OpenCL 3.0 NEO  [24.22.29735.27]\n"
    "[opencl:gpu][opencl:2] Intel(R) OpenCL Graphics, Intel(R) Data Center GPU Max 1550 OpenCL 3.0 NEO  [24.22.29735.27]\n"
    "[opencl:cpu][opencl:3] Intel(R) OpenCL, Intel(R) Xeon(R) Platinum 8360Y CPU @ 2.40GHz OpenCL 3.0 (Build 0) [2023.16.7.0.21_160000]\n"
    "[opencl:fpga][opencl:4] Intel(R) FPGA Emulation Platform for OpenCL(TM), Intel(R) FPGA Emulation Device OpenCL 1.2  [2023.16.7.0.21_160000]\n"
    "[level_zero:gpu][level_zero:0] Intel(R) Level-Zero, Intel(R) Data Center GPU Max 1550 1.3 [1.3.29735]\n"
    "[level_zero:gpu][level_zero:1] Intel(R) Level-Zero, Intel(R) Data Center GPU Max 1550 1.3 [1.3.29735]\n")

SLES = 'NAME="SLES"\nVERSION_ID="15.5"\nPRETTY_NAME="SUSE Linux Enterprise Server 15 SP5"\nID="sles"\n'


def _sourced(snap: dict, sources: dict) -> dict:
    """The public pages the GPU tools' outputs of this snapshot were copied from (envkit ignores the key)."""
    snap["sources"] = sources
    return snap


def mi300x_x4():
    # The node around the GPUs: its CPU and core count from the same rocminfo (two EPYC 9474F agents
    # of 96 compute units), MemTotal the sum of their two memory pools; the torch build is the
    # scenario (a rocm6.4 wheel, which holds gfx942). No /opt/rocm/.info/version was published.
    snap = linux(os_release=UBUNTU, cpu_model="AMD EPYC 9474F 48-Core Processor", vendor_id="AuthenticAMD", cores=96,
                 mem_kb=1188729676 + 1188954608, smi=None, torch="2.9.1+rocm6.4")
    snap["commands"]["rocminfo"] = ROCMINFO_MI300X_X4
    return _sourced(snap, {"rocminfo": "https://github.com/thamada/nvidia-smi/blob/a296cf1dff865bac1d5fd7ba38789570cab4a8da/nvsim/MI300X_x4_rocminfo.py"})


def max1550_aurora():
    # Aurora's nodes: two Xeon CPU Max 9470C (52 cores each), SLES; the XPU build of torch 2.9.1 installed.
    snap = linux(os_release=SLES, cpu_model="Intel(R) Xeon(R) CPU Max 9470C", vendor_id="GenuineIntel", cores=104,
                 mem_kb=1056964608, smi=None, torch="2.9.1+xpu")
    snap["commands"]["xpu-smi discovery"] = XPU_SMI_AURORA
    return _sourced(snap, {"xpu-smi discovery": "https://github.com/argonne-lcf/user-guides/blob/389982dc83ca102cef1c82aedba0663c8bc1cc76/docs/aurora/performance-tools/xpu-smi.md"})


def max1550_sycl_ls():
    # xpu-smi is not installed there (it is a separate package): sycl-ls answers. Xeon 8360Y: 36 cores
    # a socket, two sockets; memory filled (512 GiB); the XPU build of torch 2.8.0 installed.
    snap = linux(os_release=UBUNTU, cpu_model="Intel(R) Xeon(R) Platinum 8360Y CPU @ 2.40GHz", vendor_id="GenuineIntel",
                 cores=72, mem_kb=536870912, smi=None, torch="2.8.0+xpu")
    snap["commands"]["sycl-ls"] = SYCL_LS_MAX1550
    return _sourced(snap, {"sycl-ls": "https://github.com/oneapi-src/oneAPI-samples/blob/27f723f0ddfbd0fc3f081ade896eadf405b7c31e/Tools/ApplicationDebugger/guided_matrix_mult_InvalidContexts/README.md"})


SNAPSHOTS = {
    "linux_rocm_rx7900xtx": amd_machine(cpu="AMD Ryzen 9 5900X 12-Core Processor", cores=12, gpu_arch="gfx1100",
                                        gpu_name="Radeon RX 7900 XTX", rocm="6.4.1-83", torch="2.9.1+rocm6.4"),
    "linux_rocm_rx590": amd_machine(cpu="AMD Ryzen 7 2700X Eight-Core Processor", cores=8, gpu_arch="gfx803",
                                    gpu_name="Radeon RX 590 Series", rocm="6.3.1-48", torch="2.8.0+cpu"),
    "linux_xpu_arc_a770": intel_machine(torch="2.9.1+cpu"),
    "linux_rocm_mi350x": _with_amd_smi(linux(os_release=UBUNTU, cpu_model="AMD EPYC 9575F 64-Core Processor", vendor_id="AuthenticAMD",
                                             cores=64, mem_kb=2113000000, smi=None, torch=None)),
    "linux_rocm_mi300x_x4": mi300x_x4(),
    "linux_xpu_max1550_aurora": max1550_aurora(),
    "linux_xpu_max1550_sycl_ls": max1550_sycl_ls(),
}


def main() -> None:
    for name, snap in SNAPSHOTS.items():
        (HERE / f"{name}.json").write_text(json.dumps(snap, indent=2) + "\n")
    print(f"wrote {len(SNAPSHOTS)} snapshots to {HERE}")


if __name__ == "__main__":
    main()

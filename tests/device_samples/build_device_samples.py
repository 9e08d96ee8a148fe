"""Builds the replayed device samples in this folder (run it to regenerate them).

Each file is an envkit snapshot (the facts runner's replay format) holding the outputs of the
commands the device sampler runs, and a "source" saying where the output comes from:

- mac_m1pro_stats1094.json: an M1 Pro MacBook Pro (GPU "gpu,t6000", AGXAcceleratorG13X) on macOS
  12.6, as quoted in https://github.com/exelban/stats/issues/1094 (output of
  `ioreg -r -d 1 -w 0 -c "IOAccelerator"`). The text form is kept verbatim (the lines quoted there);
  the `-a` plist form holds the same PerformanceStatistics values, converted with plistlib (the
  issue quotes the text form only). memory_pressure: the header and the "System-wide memory free
  percentage" line in the form public parsers quote (e.g. the grove memory test); not recorded.
- nvidia_2gpu.json: two GPUs, in the exact shape of NVIDIA_SMI_SAMPLE (csv,noheader,nounits); the
  second GPU idle with power "[N/A]". Written to nvidia-smi's documented format, not recorded:
  replace or complement it with `python benchmarks/record_device_sample.py` on a real machine.
- nvidia_garbled.json: what a sick driver prints: an "Unable to determine the device handle" line
  (rc 15, a GPU fallen off the bus), a half-written line, "[Not Supported]" fields and "ERR!".
- nvidia_nvml_mismatch.json: "Failed to initialize NVML: Driver/library version mismatch" (rc 18).
"""

from __future__ import annotations

import json
import plistlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
IOREG = "ioreg -r -d 1 -w 0 -c IOAccelerator"
NVSMI = ("nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu "
         "--format=csv,noheader,nounits")

# Verbatim from exelban/stats#1094 (the lines quoted there, in order).
STATS_1094_TEXT = """+-o AGXAcceleratorG13X  <class AGXAcceleratorG13X, id 0x10000087c, registered, matched, active, busy 0 (17 ms), retain 24>
    {
      "AGXParameterBufferMaxSizeEverMemless" = 574881792
      "IOMatchedAtBoot" = Yes
      "vendor-id" = <6b100000>
      "GPURawCounterBundleName" = "AGXGPURawCounterBundle"
      "MetalStatisticsName" = "AGXMetalStatisticsExternalA14X"
      "GPURawCounterPluginClassName" = "AGXGPURawCounterSourceGroup"
      "MetalPluginClassName" = "AGXG13XDevice"
      "SCMVersionNumber" = ""
      "AGCInfo" = {"fLastSubmissionPID"=390,"fSubmissionsSinceLastCheck"=0,"fBusyCount"=0}
      "MetalPluginName" = "AGXMetalG13X"
      "IONameMatched" = "gpu,t6000"
      "PerformanceStatistics" = {"TiledSceneBytes"=1572864,"Alloc system memory"=1214005248,"Tiler Utilization %"=2,"recoveryCount"=0,"Renderer Utilization %"=2,"SplitSceneCount"=0,"Allocated PB Size"=17956864,"Device Utilization %"=2,"In use system memory"=340983808}
      "IOGLBundleName" = "AppleMetalOpenGLRenderer"
      "AGXParameterBufferMaxSizeNeverMemless" = 287440896
      "IOGLESBundleName" = "AppleMetalGLRenderer"
      "IOSourceVersion" = "190.22"
      "IOPersonalityPublisher" = "com.apple.AGXG13X"
    }
"""  # noqa: E501 - verbatim from the issue: ioreg prints the dictionary on one line
STATS_1094_PERF = {"TiledSceneBytes": 1572864, "Alloc system memory": 1214005248, "Tiler Utilization %": 2,
                   "recoveryCount": 0, "Renderer Utilization %": 2, "SplitSceneCount": 0, "Allocated PB Size": 17956864,
                   "Device Utilization %": 2, "In use system memory": 340983808}
MEMORY_PRESSURE = ("The system has 17179869184 (1048576 pages with a page size of 16384).\n\nStats: \n"
                   "Pages free: 160214 \n\nSystem-wide memory free percentage: 62%\n")


def snapshot(system: str, source: str, commands: dict, files: dict | None = None) -> dict:
    return {"envkit_snapshot": 1, "system": system, "source": source, "commands": commands, "files": files or {}}


def main() -> None:
    plist = plistlib.dumps([{"IOClass": "AGXAcceleratorG13X", "IONameMatched": "gpu,t6000", "IOSourceVersion": "190.22",
                             "PerformanceStatistics": STATS_1094_PERF}], fmt=plistlib.FMT_XML).decode()
    samples = {
        "mac_m1pro_stats1094": snapshot("Darwin", "https://github.com/exelban/stats/issues/1094 (M1 Pro, macOS 12.6); "
                                        "-a form converted from the quoted text form", {
                                            IOREG + " -a": plist, IOREG: STATS_1094_TEXT, "memory_pressure": MEMORY_PRESSURE}),
        "nvidia_2gpu": snapshot("Linux", "written to nvidia-smi's documented csv,noheader,nounits format (2 x H200)", {
            NVSMI: "0, GPU-5f1d2c3a-9b8e-4f7a-a1b2-0c9d8e7f6a51, 97, 131072, 143771, 612.34, 66\n"
                   "1, GPU-8e2a4b6c-1d3f-4e5a-b7c9-2d4f6a8b0c13, 0, 4, 143771, [N/A], 31\n"},
            {"/proc/self/status": "Name:\tpython\nVmPeak:\t 9876543 kB\nVmRSS:\t 3145728 kB\nThreads:\t12\n"}),
        "nvidia_garbled": snapshot("Linux", "what a failing GPU prints (Xid 79 'fallen off the bus' class of errors)", {
            NVSMI: {"rc": 15, "stdout": "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error\n"
                                        "0, GPU-5f1d2c3a-9b8e-4f7a-a1b2-0c9d8e7f6a51, [Not Supported], 80123, 81559, ERR!, 71\n"
                                        "1, GPU-8e2a4b6c-1d3f-4e5a-b7c9-2d4\n"
                                        "\x1b[0m\ufffd\ufffd\n",
                    "stderr": ""}}),
        "nvidia_nvml_mismatch": snapshot("Linux", "nvidia-smi after a driver upgrade without a reboot", {
            NVSMI: {"rc": 18, "stdout": "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\n",
                    "stderr": ""}}),
    }
    for name, snap in samples.items():
        (HERE / f"{name}.json").write_text(json.dumps(snap, indent=2) + "\n")
        print(f"wrote {name}.json")


if __name__ == "__main__":
    main()

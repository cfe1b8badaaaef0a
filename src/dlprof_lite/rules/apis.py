"""CUDA API calls by name: which launch GPU work, which wait for it.

- Launch calls (docs/design.md "CUDA graphs" and "Kernel <-> API call"): kernel launches
  (``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cuLaunchKernel``, ``cuLaunchKernelEx``,
  cooperative launches), graph launches (``cudaGraphLaunch``: CUPTI gives a graph's kernels
  its correlation id) and copies/sets; nsys records the runtime calls with a version suffix
  (``cudaLaunchKernel_v7000``), matched by prefix.
- Synchronizing calls, as the nsys expert-system rule ``cuda-sync-api`` ("Synchronous
  APIs", ``nsys analyze --help-rules``) reports them: ``cudaDeviceSynchronize`` and
  ``cudaStreamSynchronize`` (suffixed versions included).
"""

from __future__ import annotations

# Regular expressions for ``str.contains`` over the distinct API names.
LAUNCH_API_PATTERN = r"^cu(?:da)?(?:LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy|Memset)"
VERSION_SUFFIX_PATTERN = r"_v\d+$"
# Name prefixes for ``str.startswith``.
SYNC_APIS = ("cudaDeviceSynchronize", "cudaStreamSynchronize")

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

# Calls that block the calling thread until the device catches up (the idle partition's
# ``sync`` cause, rules/idle.py), matched on the name without nsys's version suffix:
# explicit synchronisation (runtime and driver: device/context, stream, event); copies
# without ``Async`` (cudaMemcpy, cudaMemcpyToSymbol, cuMemcpyDtoH_v2: synchronous, CUDA
# Runtime API "API synchronization behavior"); cudaFree/cuMemFree, which synchronise the
# device implicitly (CUDA C++ Programming Guide, "Implicit Synchronization"), as torch's
# allocator does on empty_cache() or an allocation retry. ``.item()``/``.cpu()`` are a
# cudaMemcpyAsync then a cudaStreamSynchronize: the second is the wait.
HOST_WAIT_API_PATTERN = (
    r"^(?:cuda(?:Device|Stream|Event)Synchronize|cu(?:Ctx|Stream|Event)Synchronize"
    r"|cudaMemcpy(?:2D|3D)?(?:Peer|ToSymbol|FromSymbol|ToArray|FromArray)?"
    r"|cuMemcpy(?:HtoD|DtoH|DtoD|HtoA|AtoH|DtoA|AtoD|AtoA|2D|3D|Peer)?"
    r"|cudaFree|cuMemFree)(?:_v\d+)?$"
)

# A stream made to wait for an event (the critical path's event edges: the export's
# synchronisation record names the waiting stream), and a host wait for one stream only.
STREAM_WAIT_API_PATTERN = r"^cu(?:da)?StreamWaitEvent(?:_v\d+)?$"
STREAM_SYNC_API_PATTERN = r"^cu(?:da)?StreamSynchronize(?:_v\d+)?$"

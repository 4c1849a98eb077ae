"""weft's communicator, made from a torch.distributed process group: rank 0 makes NCCL's bootstrap
id, the group carries it to the others, and every rank joins a communicator of weft's own (so weft
can abort it on a stuck call without touching the group's). Without torch.distributed initialised,
a world of one on the current GPU."""

import torch

from .. import _native

_state = {"comm": None, "group": None, "world": None}


def init(group=None, device=None):
    """Makes weft's communicator for `group` (default: the world group) on `device` (default: the
    current CUDA device). Collective over the group; call once per process, after
    torch.distributed.init_process_group. Returns the communicator."""
    import torch.distributed as dist

    if device is None:
        device = torch.cuda.current_device()
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if dist.is_available() and dist.is_initialized():
        if group is None:
            group = dist.group.WORLD
        rank = dist.get_rank(group)
        world = dist.get_world_size(group)
        holder = [_native.new_unique_id() if rank == 0 else None]
        dist.broadcast_object_list(holder, src=dist.get_global_rank(group, 0), group=group, device=device)
        unique_id = holder[0]
    else:
        if group is not None:
            raise ValueError("weft.torch.init: a group was given but torch.distributed is not initialised")
        rank, world, unique_id = 0, 1, _native.new_unique_id()
    _state["comm"] = _native.Communicator.from_unique_id(unique_id, rank, world, device.index)
    _native.set_torch_communicator(_state["comm"])
    _state["group"] = group
    _state["world"] = (_state["comm"], world)
    return _state["comm"]


def is_initialized():
    return _state["comm"] is not None


def communicator():
    if _state["comm"] is None:
        raise RuntimeError("weft.torch.init() has not been called")
    return _state["comm"]


def process_group():
    """The torch.distributed group weft's communicator spans (None for a world of one without
    torch.distributed)."""
    return _state["group"]


def world_size():
    # From Python's state, not the native communicator: torch.compile traces a dict read, where a
    # call into the native module is a graph break (every layer asks this in its forward).
    comm, cached = _state["comm"], _state["world"]
    if comm is None:
        raise RuntimeError("weft.torch.init() has not been called")
    return cached[1] if cached is not None and cached[0] is comm else comm.world_size  # a stand-in communicator (tests): its own


def all_gather_rows(x, async_op=False):
    """Every rank's x stacked by rank (torch.distributed on weft's group; x itself at world 1). With
    async_op, (the tensor, a handle to wait() on before reading it; None at world 1)."""
    world = world_size()
    if world == 1:
        return (x, None) if async_op else x
    out = x.new_empty((world * x.shape[0],) + tuple(x.shape[1:]))
    work = torch.distributed.all_gather_into_tensor(out, x.contiguous(), group=process_group(), async_op=async_op)
    return (out, work) if async_op else out


def reduce_scatter_rows(x):
    """Rank r's rows [r * t, (r + 1) * t) of the sum over ranks of x [W t, ...] (torch.distributed on
    weft's group; x itself at world 1): all_gather_rows' transpose, as a gathered tensor's gradient."""
    world = world_size()
    if world == 1:
        return x
    out = x.new_empty((x.shape[0] // world,) + tuple(x.shape[1:]))
    torch.distributed.reduce_scatter_tensor(out, x.contiguous(), group=process_group())
    return out

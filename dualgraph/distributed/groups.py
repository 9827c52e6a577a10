"""Process sub-groups (``torch.distributed.new_group``): a set of the world's ranks that
collectives can run over, each group on its own MPI communicator (``MPI_Comm_split``), so
that the operations of two groups, even of the same ranks, never match each other.

Every rank of the world calls ``new_group(ranks)``, in the same order and with the same
ranks (checked, against the deadline); the members get a :class:`ProcessGroup` they pass as
``group=`` to any collective, and the other ranks a non-member group
(``== GroupMember.NON_GROUP_MEMBER``), on which ``get_rank`` and ``get_world_size`` are -1
and any collective is an error naming the group. As in torch, ``src`` and ``dst`` of a
collective on a group are global ranks; within the group, ranks count from 0 in increasing
global order (``get_group_rank``, ``get_global_rank``).

>>> import dualgraph.distributed as dist
>>> pair = dist.new_group([0, 1])             # every rank calls it
>>> if dist.get_rank(pair) >= 0:              # a member
...     dist.all_reduce(t, group=pair)
"""
from __future__ import annotations

from ..ops import collective as _c

__all__ = ["ProcessGroup", "GroupMember", "group", "new_group", "get_process_group_ranks",
           "get_group_rank", "get_global_rank"]


class ProcessGroup:
    """Ranks of the world that communicate together: ``rank()`` (this process's rank in
    the group, -1 outside it), ``size()``, ``ranks`` (global, increasing). The world's
    group is ``dist.group.WORLD``."""

    def __init__(self, ranks: tuple | None, key: tuple | None = None):
        self._ranks = ranks    # None: the world (its ranks are read once it exists)
        self._key = ranks if key is None else key

    @property
    def key(self) -> tuple | None:
        """What the collective ops name the group by (their attr ``group``): its global
        ranks, then ``'#n'`` for the n-th later group of the same ranks; None for the
        world."""
        return self._key

    @property
    def ranks(self) -> tuple:
        return self._ranks if self._ranks is not None else tuple(range(_c.comm().size))

    def is_member(self) -> bool:
        return self._ranks is None or _c.comm().rank in self._ranks

    def rank(self) -> int:
        return _c.comm(self._key).rank if self.is_member() else -1

    def size(self) -> int:
        return len(self.ranks) if self.is_member() else -1

    def __eq__(self, other) -> bool:
        if other is GroupMember.NON_GROUP_MEMBER:
            return not self.is_member()
        return isinstance(other, ProcessGroup) and other._key == self._key

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        if self._ranks is None:
            return "ProcessGroup(WORLD)"
        outside = "" if self.is_member() else ", not a member"
        later = "".join(f" {n}" for n in self._key[len(self._ranks):])
        return f"ProcessGroup(ranks={list(self._ranks)}{later}{outside})"


class GroupMember:
    """torch's names: ``WORLD`` (the default group), and ``NON_GROUP_MEMBER``, which the
    group ``new_group`` gives a rank outside it compares equal to."""
    WORLD = ProcessGroup(None)
    NON_GROUP_MEMBER = -100


group = GroupMember   # (dist.group.WORLD, as torch)


def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization: bool = False, group_desc=None) -> ProcessGroup:
    """A process group of the global ``ranks`` (all of them by default) on a communicator
    of its own: another group of the same ranks (or the world) runs its operations
    independently. Every rank of the world must call it, in the same order, with the same
    ranks; the ranks outside get a non-member group. ``timeout`` (a ``timedelta`` or
    seconds): the deadline of the group's operations (the world's by default).

    >>> evens = dist.new_group([r for r in range(dist.get_world_size()) if r % 2 == 0])
    """
    world = _c.comm()
    members = tuple(range(world.size)) if ranks is None else tuple(sorted(int(r) for r in ranks))
    if not members or len(set(members)) != len(members) or not (
            0 <= members[0] and members[-1] < world.size):
        raise ValueError(f"new_group({ranks!r}): give distinct ranks of the world (0 to "
                         f"{world.size - 1}), at least one")
    # every rank counts the groups of each set of ranks (all ranks make every group, in the
    # same order), so all name the n-th later group of the same ranks alike: ``(*ranks, '#n')``
    later = _c.STATE.made.get(members, 0)
    _c.STATE.made[members] = later + 1
    key = members + (f"#{later}",) if later else members
    sub = world.new_group(members)
    _c.STATE.groups[key] = sub   # (None on a rank outside the group)
    if timeout is not None and sub is not None:
        sub.timeout = getattr(timeout, "total_seconds", lambda: timeout)()
    return ProcessGroup(members, key)


def resolve(group) -> tuple | None:
    """The ops' name of ``group`` (None for the world): an error if this rank is not in it."""
    if group is None:
        return None
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"group={group!r}: pass a group made by dist.new_group (or None, "
                        "or dist.group.WORLD)")
    _c.comm(group.key)   # (the error for a non-member, naming the group)
    return group.key


def group_peer(group, rank: int, what: str) -> int:
    """The group rank of global rank ``rank`` (a collective's ``src`` or ``dst``)."""
    ranks = (group or GroupMember.WORLD).ranks
    if rank not in ranks:
        raise ValueError(f"{what}={rank} is not a rank of the group of global ranks "
                         f"{list(ranks)}; {what} is a global rank, as in torch")
    return ranks.index(rank)


def get_process_group_ranks(group) -> list[int]:
    """The global ranks of ``group``, in group order."""
    return list((group or GroupMember.WORLD).ranks)


def get_group_rank(group, global_rank: int) -> int:
    """``global_rank``'s rank within ``group``."""
    return group_peer(group, global_rank, "global_rank")


def get_global_rank(group, group_rank: int) -> int:
    """The global rank of rank ``group_rank`` of ``group``."""
    ranks = (group or GroupMember.WORLD).ranks
    if not 0 <= group_rank < len(ranks):
        raise ValueError(f"group_rank={group_rank}: the group has {len(ranks)} ranks")
    return ranks[group_rank]


def destroy(group) -> None:
    """Free ``group``'s communicator (every rank calls it, as ``new_group``)."""
    sub = _c.STATE.groups.pop(group.key, None)
    if sub is not None:
        sub.close()


def destroy_all() -> None:
    for sub in _c.STATE.groups.values():
        if sub is not None:
            sub.close()
    _c.STATE.groups, _c.STATE.made = {}, {}

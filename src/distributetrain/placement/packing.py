"""The arithmetic behind the optimal placement, over counts-of-counts (how many nodes have each free count).

Free counts are small integers (a node typically has at most 8 or 16 GPUs), so every function here works on
`values` (the distinct free counts, strictly descending, all > 0) and `counts` (how many nodes have each),
never on nodes. docs/planner.md proves why the choices made here are optimal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter, mul
from typing import NamedTuple


def fewest_nodes(values: Sequence[int], counts: Sequence[int], gpus: int) -> int | None:
    """The fewest nodes whose free GPUs add up to `gpus` (None: not even all of them): largest first."""
    nodes = 0
    for value, count in zip(values, counts, strict=True):
        if value * count >= gpus:
            return nodes - (-gpus // value)
        gpus -= value * count
        nodes += count
    return None


def _below(counts: Sequence[int]) -> list[int]:
    """below[i]: how many nodes have a free count smaller than values[i] (below[len] = 0)."""
    out = [0] * (len(counts) + 1)
    for i in range(len(counts) - 1, -1, -1):
        out[i] = out[i + 1] + counts[i]
    return out


def least_take(values: Sequence[int], counts: Sequence[int], below: Sequence[int], i: int, need: int,
               left: int) -> int | None:
    """The fewest nodes of free count values[i] to take when `left` nodes of values[i:] must still add up to
    `need` (None: impossible). Taking one more of values[i] instead of a smaller one never lowers the
    reachable sum, so start from the most and swap down while the sum still suffices."""
    value, size = values[i], len(values)
    low, high = max(0, left - below[i + 1]), min(counts[i], left)
    if low > high:
        return None
    reach, rest, j = high * value, left - high, i + 1
    while rest > 0:  # the largest `rest` nodes below values[i]
        use = min(counts[j], rest)
        reach, rest, j = reach + use * values[j], rest - use, j + 1
    surplus = reach - need
    if surplus < 0:
        return None
    # a swap costs `value - smaller`, which only grows further down: stop at the first that does not fit
    take, skip, j = high, left - high, i + 1
    while take > low and j < size:
        available = counts[j] - skip
        if available <= 0:
            skip, j = -available, j + 1
            continue
        skip = 0
        cost = value - values[j]
        swaps = min(available, take - low, surplus // cost)
        take, surplus = take - swaps, surplus - swaps * cost
        if swaps < available:
            break
        j += 1
    return take


def lexmin_choice(values: Sequence[int], counts: Sequence[int], nodes: int, gpus: int) -> list[int] | None:
    """How many nodes of each free count to take: exactly `nodes`, adding up to at least `gpus`, with as few
    of the largest count as possible, then as few of the next, and so on (None: impossible)."""
    below = _below(counts)
    taken: list[int] = []
    need, left = gpus, nodes
    for i, value in enumerate(values):
        take = least_take(values, counts, below, i, need, left)
        if take is None:
            return None
        taken.append(take)
        need, left = need - take * value, left - take
    return taken if left == 0 and need <= 0 else None


def compare_choice(values: Sequence[int], counts: Sequence[int], nodes: int, gpus: int,
                   other: Sequence[int]) -> tuple[int, list[int] | None]:
    """lexmin_choice(values, counts, nodes, gpus) compared with `other` (-1, 0, 1; 1 also when impossible),
    stopping at the first free count where they differ unless this one is smaller; the choice when <= 0."""
    below = _below(counts)
    taken: list[int] = []
    need, left, order = gpus, nodes, 0
    for i, value in enumerate(values):
        take = least_take(values, counts, below, i, need, left)
        if take is None:
            return 1, None
        if order == 0 and take != other[i]:
            if take > other[i]:
                return 1, None
            order = -1
        taken.append(take)
        need, left = need - take * value, left - take
    return (order, taken) if left == 0 and need <= 0 else (1, None)


@dataclass(frozen=True)
class DomainChoice:
    nodes: int
    taken: list[int]  # nodes to take per free count of `values`
    domains: tuple[str, ...]


class DomainSearch:
    """The best set among the sets of the fewest domains holding `gpus`.

    Domains with equal counts-of-counts ("kinds") are interchangeable, so sets are multisets of kinds.
    With one domain (most requests), every kind is a candidate; the lexmin choice is then taken among those
    needing the fewest nodes in lockstep, free count by free count from the largest, dropping a kind as soon
    as it must take more nodes of a count than another. With several domains, branch and bound twice:
    first for the fewest nodes, then for the lexmin choice among the sets needing that many. Bounds for a
    partial set with `slots` domains still to add from the kinds left:
    - capacity: at most `slots` times the largest total left;
    - nodes: the sum of the t largest free counts is min over theta of t*theta + sum (v - theta)^+ (the LP
      dual), and each kind left adds at most the largest sum (v - theta)^+ of the kinds left, per theta;
    - choice: the union is at most, per free count, the most any kind left has, times `slots`; a larger union
      never needs a lexicographically larger choice; on a tie, the names can be no smaller than the current
      ones plus the smallest name left.
    The kinds left are a suffix, so every bound only tightens as the index grows: a failed one ends the loop.
    """

    def __init__(self, values: Sequence[int], gpus: int, kinds: Mapping[tuple[int, ...], list[str]]) -> None:
        self.values, self.gpus = list(values), gpus
        # most nodes of the largest free counts first (vectors are distinct, so this order is total): sets
        # needing few nodes come early, and the suffix maxima shrink fast, which makes the bounds bite
        self.kinds = sorted(((vector, sorted(domains)) for vector, domains in kinds.items() if any(vector)),
                            key=itemgetter(0), reverse=True)
        self.totals = [sum(map(mul, self.values, vector)) for vector, _ in self.kinds]
        self.fewest = -1
        self.progress = 0  # counts improvements, so a loop knows when to recompute its cut-off

    def fewest_domains(self) -> int:
        held = 0
        every = (t for t, (_, domains) in zip(self.totals, self.kinds, strict=True) for _ in domains)
        for size, total in enumerate(sorted(every, reverse=True), start=1):
            held += total
            if held >= self.gpus:
                return size
        raise ValueError(f"all domains together hold fewer than {self.gpus} GPUs")

    def run(self) -> DomainChoice:
        size = self.fewest_domains()
        return self._one_domain() if size == 1 else self._several_domains(size)

    # ---- one domain ------------------------------------------------------------------------------------

    def _one_domain(self) -> DomainChoice:
        found: list[int] = []
        for index, (vector, _) in enumerate(self.kinds):
            nodes = fewest_nodes(self.values, vector, self.gpus)
            if nodes is None or 0 <= self.fewest < nodes:
                continue
            if nodes != self.fewest:
                self.fewest, found = nodes, []
            found.append(index)
        alive = [_State(self.kinds[index][0], _below(self.kinds[index][0]), self.gpus, self.fewest, (), index)
                 for index in found]
        for i, value in enumerate(self.values):
            if alive[0].left == 0:
                break  # survivors took the same counts so far: all are complete, the rest is zeros
            least, stepped = -1, list[_State]()
            for union, below, need, left, taken, kind in alive:
                take = least_take(self.values, union, below, i, need, left)
                if take is None or 0 <= least < take:
                    continue
                if take != least:
                    least, stepped = take, []
                stepped.append(_State(union, below, need - take * value, left - take, (*taken, take), kind))
            alive = stepped
        first, taken = min((self.kinds[state.kind][1][0], state.taken) for state in alive)
        return DomainChoice(self.fewest, [*taken, *[0] * (len(self.values) - len(taken))], (first,))

    # ---- several domains -------------------------------------------------------------------------------

    def _several_domains(self, size: int) -> DomainChoice:
        values, count = self.values, len(self.kinds)
        zero = tuple(0 for _ in values)
        # per kind and theta (each free count): sum over its nodes of (value - theta)^+
        self.excess = [tuple(sum((v - theta) * c for v, c in zip(values, vector, strict=True) if v > theta)
                             for theta in values) for vector, _ in self.kinds]
        self.max_count, self.max_excess = [zero] * (count + 1), [zero] * (count + 1)
        self.max_total = [0] * (count + 1)
        self.min_name = [chr(0x10FFFF)] * (count + 1)
        for index in range(count - 1, -1, -1):
            self.min_name[index] = min(self.kinds[index][1][0], self.min_name[index + 1])
            self.max_count[index] = tuple(map(max, self.kinds[index][0], self.max_count[index + 1]))
            self.max_excess[index] = tuple(map(max, self.excess[index], self.max_excess[index + 1]))
            self.max_total[index] = max(self.totals[index], self.max_total[index + 1])
        self.best: tuple[tuple[int, ...], tuple[str, ...]] | None = None
        self._walk(0, size, zero, zero, 0, (), choosing=False)
        self._walk(0, size, zero, zero, 0, (), choosing=True)
        assert self.best is not None  # the first pass found a set needing the fewest nodes
        return DomainChoice(self.fewest, list(self.best[0]), self.best[1])

    def _node_bound(self, excess: tuple[int, ...], index: int, slots: int) -> int:
        """The fewest nodes any completion could need (see the class notes)."""
        low = 0
        for theta, mine, most in zip(self.values, excess, self.max_excess[index], strict=True):
            short = self.gpus - mine - slots * most
            if short > 0:
                low = max(low, -(-short // theta))
        return low

    def _hopeless(self, index: int, slots: int, union: tuple[int, ...], excess: tuple[int, ...], held: int,
                  picked: tuple[tuple[int, int], ...], choosing: bool) -> bool:
        """Whether no completion using kinds from `index` on can beat what was found (see the class notes)."""
        if index >= len(self.kinds) or held + slots * self.max_total[index] < self.gpus:
            return True
        if self.fewest < 0:
            return False
        low = self._node_bound(excess, index, slots)
        # first pass: only a set needing fewer nodes helps; second: ties are what we choose among
        if low > self.fewest or (low == self.fewest and not choosing):
            return True
        if not choosing or self.best is None:
            return False
        optimistic = [u + slots * m for u, m in zip(union, self.max_count[index], strict=True)]
        order, _ = compare_choice(self.values, optimistic, self.fewest, self.gpus, self.best[0])
        # on a tie of the choice the smallest names win: can the names left still do better?
        return order > 0 or (order == 0 and self._names(picked, self.min_name[index], slots) > self.best[1])

    def _end(self, start: int, slots: int, union: tuple[int, ...], excess: tuple[int, ...], held: int,
             picked: tuple[tuple[int, int], ...], choosing: bool) -> int:
        """The first index from `start` on that is hopeless: the bounds only tighten, so bisect."""
        low, high = start, len(self.kinds)
        while low < high:
            middle = (low + high) // 2
            if self._hopeless(middle, slots, union, excess, held, picked, choosing):
                high = middle
            else:
                low = middle + 1
        return low

    def _walk(self, start: int, slots: int, union: tuple[int, ...], excess: tuple[int, ...], held: int,
              picked: tuple[tuple[int, int], ...], *, choosing: bool) -> None:
        seen = self.progress
        end = self._end(start, slots, union, excess, held, picked, choosing)
        index = start
        while index < end:
            vector, domains = self.kinds[index]
            for times in range(min(slots, len(domains)), 0, -1):
                more = tuple(u + times * c for u, c in zip(union, vector, strict=True))
                more_excess = tuple(e + times * x for e, x in zip(excess, self.excess[index], strict=True))
                total, chosen = held + self.totals[index] * times, (*picked, (index, times))
                if times < slots:
                    self._walk(index + 1, slots - times, more, more_excess, total, chosen, choosing=choosing)
                elif total >= self.gpus:
                    self._leaf(more, chosen, choosing=choosing)
            index += 1
            if self.progress != seen:  # a better set was found: the bounds cut earlier now
                seen = self.progress
                end = min(end, self._end(index, slots, union, excess, held, picked, choosing))

    def _leaf(self, union: tuple[int, ...], picked: tuple[tuple[int, int], ...], *, choosing: bool) -> None:
        nodes = fewest_nodes(self.values, union, self.gpus)
        if nodes is None:
            return
        if not choosing:
            if self.fewest < 0 or nodes < self.fewest:
                self.fewest, self.progress = nodes, self.progress + 1
            return
        if nodes != self.fewest:
            return
        if self.best is None:
            taken = lexmin_choice(self.values, union, nodes, self.gpus)
            assert taken is not None  # `nodes` nodes of this union hold the request
            self.best, self.progress = (tuple(taken), self._names(picked)), self.progress + 1
            return
        order, choice = compare_choice(self.values, union, nodes, self.gpus, self.best[0])
        if order > 0 or choice is None:
            return
        names = self._names(picked)
        if order < 0 or names < self.best[1]:
            self.best, self.progress = (tuple(choice), names), self.progress + 1

    def _names(self, picked: tuple[tuple[int, int], ...], smallest_left: str = "", slots: int = 0,
               ) -> tuple[str, ...]:
        """The domain names of a set, sorted; with `slots` more, each at least `smallest_left`, the least
        the names of any completion can be."""
        names = [d for index, times in picked for d in self.kinds[index][1][:times]]
        return tuple(sorted(names + [smallest_left] * slots))


class _State(NamedTuple):
    """One kind in the lockstep."""

    union: tuple[int, ...]
    below: list[int]
    need: int
    left: int
    taken: tuple[int, ...]
    kind: int

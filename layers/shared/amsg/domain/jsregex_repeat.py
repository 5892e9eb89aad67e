"""JavaScript's rule for a quantified group that can match empty, rewritten so Python's ``regex`` follows it.

ECMAScript's RepeatMatcher refuses an iteration beyond the minimum count that ends where it started: the engine
backtracks into that iteration for another way to match, and if none consumes text it stops repeating there.
Python's engines accept the empty iteration and stop. So ``(x??|y{0,3})?`` matches ``y`` where Python matches
the empty string, and ``( ?z*)?`` leaves its group ``undefined`` where Python captures ``''``.

:func:`apply_js_repeat_rule` rewrites every ``X{lo,hi}`` whose ``X`` can match empty as ``lo`` copies of ``X``
(mandatory iterations may be empty in JavaScript too) followed by ``N{0,hi-lo}``, where ``N`` matches exactly the
non-empty matches of ``X`` *in the order X would try them*, so backtracking chooses what V8 chooses. ``N`` comes
from the ordered "blocks" of ``X``: runs of its match paths that are all empty or all non-empty. For a sequence
``A B`` a non-empty block of ``A`` keeps all of ``B``; an empty block of ``A`` is followed by each block of ``B``
in turn; in a look-behind, which both engines match right to left, ``B`` comes first. Copies of a capture keep
its number (the emitter names them). The rewrite may grow a pattern; past
:data:`MAX_REWRITTEN_NODES` it is refused as too complex, so the work stays bounded whatever the source.
"""

from __future__ import annotations

from amsg.domain.jsregex_ast import Alt, Assert, BackRef, Char, Class, Group, Node, Quant, nullable
from amsg.domain.jsregex_reset import reset_captures

__all__ = ["MAX_REWRITTEN_NODES", "Rewrite", "apply_js_repeat_rule"]

# Far above what real patterns need (the rewrite of a 200-character pattern is usually its own size).
MAX_REWRITTEN_NODES = 2_000

_Block = tuple[bool, list[Node]]  # (every path of it matches empty, the sequence)


class Rewrite:
    """The rewritten tree; ``resets`` maps a capture to the hidden iteration markers (groups numbered after
    JavaScript's ``group_count``) of the repeats that clear it (:mod:`amsg.domain.jsregex_reset`)."""

    __slots__ = ("group_count", "markers", "resets", "tree")

    def __init__(self, tree: Alt, group_count: int, markers: int, resets: dict[int, list[tuple[int, bool]]]) -> None:
        self.tree = tree
        self.group_count = group_count
        self.markers = markers
        self.resets = resets


def apply_js_repeat_rule(tree: Alt, group_count: int) -> Rewrite:
    """``tree`` with every quantified nullable subpattern rewritten (see the module docstring), and a hidden
    marker at the start of every iteration of a repeat whose captures JavaScript would clear."""
    rewriter = _Rewriter(group_count, _referenced(tree))
    rewritten = rewriter.alt(tree)
    return Rewrite(rewritten, group_count, rewriter.next_marker - group_count - 1, rewriter.resets)


def _referenced(node: Node) -> set[int]:
    match node:
        case BackRef():
            return {node.index} if node.settable else set()
        case Group():
            return _referenced(node.body)
        case Alt():
            return {index for branch in node.branches for item in branch for index in _referenced(item)}
        case Quant():
            return _referenced(node.atom)
    return set()


class _Rewriter:
    __slots__ = ("backward", "left", "lookbehind", "next_marker", "referenced", "resets", "sizes")

    def __init__(self, group_count: int, referenced: set[int]) -> None:
        self.left = MAX_REWRITTEN_NODES
        self.sizes: dict[int, tuple[Node, int]] = {}  # the node is kept so its id is never reused
        self.referenced = referenced
        self.lookbehind = 0  # enclosing look-behinds
        self.backward = False  # matching right to left: in a look-behind, not in a look-ahead inside it
        self.next_marker = group_count + 1
        self.resets: dict[int, list[tuple[int, bool]]] = {}

    def spend(self, nodes: int) -> None:
        self.left -= nodes
        if self.left < 0:
            raise ValueError("pattern too complex once JavaScript's rule for empty repeats is applied")

    def size(self, node: Node) -> int:
        """Nodes in ``node`` counted as emitted (a shared subtree counts at every use)."""
        known = self.sizes.get(id(node))
        if known is not None:
            return known[1]
        match node:
            case Quant():
                total = 1 + self.size(node.atom)
            case Group():
                total = 1 + self.size(node.body)
            case Alt():
                total = 1 + sum(self.size(item) for branch in node.branches for item in branch)
            case _:
                total = 1
        self.sizes[id(node)] = (node, total)
        return total

    # - the rewrite
    def node(self, node: Node) -> Node:
        match node:
            case Quant():
                return self.quant(node)
            case Group():
                behind, direction = node.kind in ("lb", "nlb"), self.backward
                self.lookbehind += behind
                self.backward = behind or (direction and node.kind not in ("la", "nla"))
                body = self.alt(node.body)
                self.lookbehind -= behind
                self.backward = direction
                return Group(node.kind, body, node.index, node.name)
            case Alt():
                return self.alt(node)
        return node

    def alt(self, alt: Alt) -> Alt:
        return Alt([[self.node(item) for item in branch] for branch in alt.branches])

    def quant(self, quant: Quant) -> Node:
        atom = self.node(quant.atom)
        mark = self.marker(quant)
        if quant.hi == 0 or not nullable(atom) or isinstance(atom, BackRef):
            # A repeated backreference matches the same overall text in both engines (it holds no capture).
            return Quant(_marked(mark, atom), quant.lo, quant.hi, quant.lazy)
        self.spend(quant.lo * (self.size(atom) + 1))
        items: list[Node] = [_marked(mark, atom)] * quant.lo
        if quant.hi is None or quant.hi > quant.lo:
            rest = self.non_empty(atom)
            if rest is not None:
                hi = None if quant.hi is None else quant.hi - quant.lo
                items.append(Quant(_marked(mark, rest), 0, hi, quant.lazy))
        return Group("nc", Alt([items]))

    def marker(self, quant: Quant) -> Group | None:
        """The hidden capture that marks each iteration's start, if JavaScript may clear a capture in it."""
        if quant.hi is not None and quant.hi <= 1:
            return None
        captures = reset_captures(quant.atom, self.referenced, self.lookbehind > 0)
        if not captures:
            return None
        index = self.next_marker
        self.next_marker += 1
        for capture, empty_at_start_is_own in captures:
            self.resets.setdefault(capture, []).append((index, empty_at_start_is_own))
        return Group("cap", Alt([[]]), index)

    def non_empty(self, node: Node) -> Node | None:
        """``node``'s non-empty matches in its own order, or None when it has none."""
        sequences = [sequence for empty, sequence in self.blocks(node) if not empty]
        if not sequences:
            return None
        return Group("nc", Alt(sequences))

    # - ordered blocks of match paths
    def blocks(self, node: Node) -> list[_Block]:
        match node:
            case Char() | Class():
                return [(False, [node])]
            case Assert():
                return [(True, [node])]
            case BackRef():
                raise ValueError("a backreference inside a quantified group that can match empty is not supported")
            case Group() if node.kind == "cap":
                inner = self.alt_blocks(node.body)
                return [(empty, [Group("cap", Alt([seq]), node.index, node.name)]) for empty, seq in inner]
            case Group() if node.kind == "nc":
                return self.alt_blocks(node.body)
            case Group():
                return [(True, [node])]  # a look-around consumes nothing
            case Alt():
                return self.alt_blocks(node)
            case Quant():
                return self.quant_blocks(node)
        raise AssertionError(f"unknown node {node!r}")

    def quant_blocks(self, quant: Quant) -> list[_Block]:
        if quant.hi == 0:
            return [(True, [quant])]
        if isinstance(quant.atom, BackRef):
            return self.blocks(quant.atom)  # refused
        if not nullable(quant):
            return [(False, [quant])]
        # Rewritten already, so the atom cannot match empty: `X*` tries `X+` then nothing (`X*?` the reverse).
        some = Quant(quant.atom, 1, quant.hi, quant.lazy)
        return [(True, []), (False, [some])] if quant.lazy else [(False, [some]), (True, [])]

    def alt_blocks(self, alt: Alt) -> list[_Block]:
        out: list[_Block] = []
        for branch in alt.branches:
            out += self.sequence_blocks(branch)
        return _merged(out)

    def sequence_blocks(self, items: list[Node]) -> list[_Block]:
        """Blocks of ``items`` in the order they are tried: right to left when matching backward (look-behind)."""
        result: list[_Block] = [(True, [])]
        for item in reversed(items) if self.backward else items:
            item_blocks: list[_Block] | None = None
            grown: list[_Block] = []
            for empty, sequence in result:
                if not empty:
                    grown.append((False, self.joined(sequence, [item])))
                    continue
                item_blocks = item_blocks if item_blocks is not None else self.blocks(item)
                grown += [(item_empty, self.joined(sequence, tail)) for item_empty, tail in item_blocks]
            result = _merged(grown)
        return result

    def joined(self, done: list[Node], more: list[Node]) -> list[Node]:
        """``done`` then ``more`` in match order, written left to right."""
        self.spend(len(done) + sum(self.size(node) for node in more))
        return more + done if self.backward else done + more


def _marked(mark: Group | None, atom: Node) -> Node:
    return atom if mark is None else Group("nc", Alt([[mark, atom]]))


def _merged(blocks: list[_Block]) -> list[_Block]:
    """Adjacent blocks of the same kind as one alternation (same paths, same order), so blocks never pile up."""
    runs: list[tuple[bool, list[list[Node]]]] = []
    for empty, sequence in blocks:
        if runs and runs[-1][0] == empty:
            runs[-1][1].append(sequence)
        else:
            runs.append((empty, [sequence]))
    return [(empty, seqs[0] if len(seqs) == 1 else [Group("nc", Alt(seqs))]) for empty, seqs in runs]

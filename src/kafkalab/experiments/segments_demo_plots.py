"""Plots of notebook 06: the files of a segment, drawn from what was read from them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..segments import IndexLookup, Scan, Segment

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def lookup_rows(seg: Segment, hit: IndexLookup, scan: Scan, around: int = 3
                ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int, int, str]]]:
    """What ``lookup_figure`` draws, from a segment read from disk and a lookup in it:

    - the ``.index`` entries around the one found, ``(entry number, absolute offset, position)``,
      ``around`` on each side;
    - the ``.log`` batches from the one before the entry's position to the one after the batch
      found, ``(base offset, last offset, position, bytes, role)`` with role ``"before"``,
      ``"scanned"`` (a header read and skipped), ``"found"`` or ``"after"``.

    Raises:
        ValueError: the scan found no batch, or its start is not a batch's position.
    """
    if scan.batch is None:
        raise ValueError("the scan found no batch: nothing to draw")
    i = seg.index.index(hit.entry) if hit.entry is not None else -1
    lo, hi = max(0, i - around), min(len(seg.index), max(i, 0) + around + 1)
    entries = [(n, seg.index[n].offset, seg.index[n].position) for n in range(lo, hi)]
    positions = [b.position for b in seg.batches]
    if hit.position not in positions:
        raise ValueError(f"no batch starts at position {hit.position}")
    first = positions.index(hit.position)
    found = positions.index(scan.batch.position)
    batches = []
    for k in range(max(0, first - 1), min(len(seg.batches), found + 2)):
        b = seg.batches[k]
        role = "before" if k < first else "scanned" if k < found else "found" if k == found else "after"
        batches.append((b.base_offset, b.last_offset, b.position, b.size, role))
    return entries, batches


def lookup_figure(seg: Segment, target: int, hit: IndexLookup, scan: Scan) -> "Figure":
    """The broker's way to offset ``target`` in one segment, drawn from the files: the target,
    the ``.index`` entries around the one the binary search found (offset, position), the
    arrow from that entry's position into the ``.log``, the batch headers read from there, and
    the batch that holds ``target``. Every number is read from ``seg`` (the segment as read from
    disk), ``hit`` (``segments.lookup_offset``) and ``scan`` (``segments.scan_for_offset``)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    entries, batches = lookup_rows(seg, hit, scan)
    rows = max(len(entries), len(batches))
    fig, ax = plt.subplots(figsize=(12, 0.62 * rows + 2.2))
    ax.set_xlim(0, 12)
    ax.set_ylim(-0.9, rows + 1.4)
    ax.invert_yaxis()
    ax.axis("off")
    colours = {"before": "#eeeeee", "scanned": "#fde0a6", "found": "#9fd89f", "after": "#eeeeee"}

    # the target
    ax.add_patch(Rectangle((0.1, 0.1), 1.7, 0.8, facecolor="#cfe2ff", edgecolor="black"))
    ax.text(0.95, 0.5, f"offset {target}", ha="center", va="center", fontsize=11, weight="bold")
    ax.text(0.95, 1.25, "fetch / seek", ha="center", va="center", fontsize=9, color="dimgray")

    # the .index
    ax.text(3.9, -0.45, f"{seg.log.with_suffix('.index').name}\n{len(seg.index)} entries of 8 bytes",
            ha="center", va="center", fontsize=9)
    hit_y = None
    for y, (n, offset, position) in enumerate(entries):
        is_hit = hit.entry is not None and offset == hit.entry.offset
        ax.add_patch(Rectangle((2.4, y + 0.1), 3.0, 0.8, facecolor="#cfe2ff" if is_hit else "white",
                               edgecolor="black", linewidth=1.6 if is_hit else 0.8))
        ax.text(2.5, y + 0.5, f"#{n}", va="center", fontsize=8, color="dimgray")
        ax.text(5.3, y + 0.5, f"offset {offset} -> pos {position}", va="center", ha="right", fontsize=9,
                weight="bold" if is_hit else "normal")
        if is_hit:
            hit_y = y + 0.5
    probes = len(hit.probes)
    found_entry = (f"binary search: {probes} probe{'s' if probes != 1 else ''} for the\nlargest offset <= {target}"
                   if hit.entry is not None else f"no entry <= {target}:\nthe scan starts at position 0")
    ax.text(3.9, len(entries) + 0.6, f"{found_entry}; an entry is\n(a batch's last offset, its position)",
            ha="center", va="center", fontsize=9)

    # the .log
    ax.text(9.0, -0.45, f"{seg.log.name}\n{len(seg.batches)} batches, {seg.size:,} bytes", ha="center",
            va="center", fontsize=9)
    pos_y = found_y = None
    for y, (base, last, position, size, role) in enumerate(batches):
        ax.add_patch(Rectangle((6.6, y + 0.1), 4.8, 0.8, facecolor=colours[role], edgecolor="black",
                               linewidth=1.6 if role == "found" else 0.8))
        ax.text(6.7, y + 0.5, f"pos {position}", va="center", fontsize=8, color="dimgray")
        label = {"scanned": "header read, skipped", "found": f"holds {target}", "before": "", "after": ""}[role]
        ax.text(11.3, y + 0.5, f"batch {base}-{last}, {size:,} B  {label}", va="center", ha="right", fontsize=9,
                weight="bold" if role == "found" else "normal")
        if position == hit.position:
            pos_y = y + 0.5
        if role == "found":
            found_y = y + 0.5
    ax.text(9.0, len(batches) + 0.45, f"{scan.headers_read} batch header{'s' if scan.headers_read != 1 else ''} read, {scan.bytes_skipped:,} bytes "
            f"skipped;\nthe fetch returns batch {scan.batch.base_offset}-{scan.batch.last_offset} whole",
            ha="center", va="center", fontsize=9)

    def arrow(a, b, **kw):
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=14, linewidth=1.4, **kw))

    if hit_y is not None:
        arrow((1.8, 0.5), (2.4, hit_y), color="tab:blue")
    if hit_y is None and pos_y is not None:
        arrow((1.8, 0.3), (6.6, pos_y - 0.2), color="tab:blue", connectionstyle="arc3,rad=-0.15")
    if hit_y is not None and pos_y is not None:
        arrow((5.4, hit_y), (6.6, pos_y), color="tab:blue")
    if pos_y is not None and found_y is not None and found_y != pos_y:
        arrow((6.45, pos_y), (6.45, found_y), color="tab:orange", connectionstyle="arc3,rad=0.4")
    ax.set_title(f"Finding offset {target}: .index entry -> file position -> batch in the .log "
                 f"(segment base offset {seg.base_offset}; the .index stores offsets relative to it)", fontsize=10)
    fig.tight_layout()
    return fig

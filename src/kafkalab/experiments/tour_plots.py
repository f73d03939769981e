"""Figures of notebook 00: the listeners of the lab cluster and the fault proxy between a client
and the FAULT listeners, drawn from the topology the cluster runs (``kafkalab.config``), not
from typed numbers.

Source: Kafka documentation, Broker Configs (``listeners``, ``advertised.listeners``,
``inter.broker.listener.name``, ``controller.listener.names``); KIP-103 (a client is sent the
addresses of the listener its request arrived on); the port plan in ``kafkalab.config``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import cluster, config

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Colour of each path in the figure (one per listener a client or a broker uses).
COLOURS = {"CLIENT": "tab:blue", "TLS": "tab:cyan", "FAULT": "tab:red", "INTERNAL": "tab:green",
           "CONTROLLER": "tab:purple"}
#: Rows of a broker box, top to bottom: the listeners a broker binds (``Node.ports``).
BROKER_ROWS = ("CLIENT", "TLS", "FAULT", "INTERNAL")


@dataclass(frozen=True)
class ListenerPort:
    """One port in the figure: who binds it (``node``: a node id, or ``"proxy"``), the listener
    it serves, the port, and what it is for."""

    node: int | str
    listener: str
    port: int
    use: str


def listener_ports(topology: config.Topology | None = None) -> list[ListenerPort]:
    """Every port of the cluster the figure draws, from ``topology`` (default: the one running,
    ``_running_topology``): each controller's
    CONTROLLER port; each broker's CLIENT, TLS, FAULT (as bound) and INTERNAL ports; and, per
    broker, the fault proxy's port, which the FAULT listener advertises."""
    topo = topology or _running_topology()
    out = [ListenerPort(c.node_id, "CONTROLLER", c.controller_port, "the KRaft quorum; brokers register here")
           for c in topo.controller_nodes]
    uses = {"CLIENT": "applications", "TLS": "applications over TLS", "FAULT": "bound; advertised at the proxy",
            "INTERNAL": "replication between brokers"}
    for b in topo.brokers:
        out += [ListenerPort(b.node_id, name, b.ports[name], uses[name]) for name in BROKER_ROWS]
        out.append(ListenerPort("proxy", "FAULT", b.fault_proxy_port, f"advertised by broker {b.node_id}; "
                                f"forwards to {b.ports['FAULT']}"))
    return out


def _running_topology() -> config.Topology:
    """The topology ``kafkalab up`` chose (``cluster.cluster().topology``: saved with the
    cluster; the default shape if none was started here)."""
    return cluster.cluster().topology


def listeners_figure(topology: config.Topology | None = None) -> "Figure":
    """The listeners and the fault proxy: one lane per broker, each with the ports it binds
    (CLIENT, TLS, FAULT, INTERNAL), a client at the left connecting straight to CLIENT and TLS
    and through the fault proxy's port (the FAULT listener's advertised address) to the FAULT
    port, replication between the INTERNAL ports, and the brokers registering with the
    controller(s) on CONTROLLER. Every port is read from ``topology`` (``listener_ports``).
    Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    topo = topology or _running_topology()
    ports = listener_ports(topo)
    brokers = topo.brokers
    row_h, lane_gap = 0.62, 0.55
    lane_h = row_h * (len(BROKER_ROWS) + 1)            # a header row and one row per listener
    height = len(brokers) * lane_h + (len(brokers) - 1) * lane_gap
    fig, ax = plt.subplots(figsize=(12.5, 0.62 * height + 1.2))
    ax.set_xlim(0, 15.2)
    ax.set_ylim(-1.0, height + 0.55)
    ax.axis("off")

    def box(x0, y0, w, h, text, colour="0.35", fill="white", size=9.5, weight="normal", lw=1.2):
        ax.add_patch(FancyBboxPatch((x0, y0), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                    fc=fill, ec=colour, lw=lw))
        ax.text(x0 + w / 2, y0 + h / 2, text, ha="center", va="center", fontsize=size, weight=weight)

    def arrow(x0, y0, x1, y1, colour, style="-|>", ls="-", rad=0.0, lw=1.6):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle=style, color=colour, lw=lw, linestyle=ls,
                                    shrinkA=0, shrinkB=0, connectionstyle=f"arc3,rad={rad}"))

    # columns
    cx0, cx1 = 0.2, 2.6        # the client
    px0, px1 = 4.3, 6.5        # the fault proxy
    bx0, bx1 = 8.0, 11.2       # the brokers
    kx0, kx1 = 12.7, 15.0      # the controller(s)

    row_y: dict[tuple[int, str], float] = {}
    for i, b in enumerate(brokers):
        top = height - i * (lane_h + lane_gap)
        ax.add_patch(FancyBboxPatch((bx0, top - lane_h), bx1 - bx0, lane_h,
                                    boxstyle="round,pad=0.02,rounding_size=0.1", fc="0.96", ec="0.3", lw=1.4))
        ax.text((bx0 + bx1) / 2, top - row_h / 2, f"broker {b.node_id}", ha="center", va="center",
                fontsize=10.5, weight="bold")
        by_name = {p.listener: p for p in ports if p.node == b.node_id}
        for j, name in enumerate(BROKER_ROWS):
            y = top - row_h * (j + 1.5)
            row_y[(b.node_id, name)] = y
            box(bx0 + 0.15, y - row_h * 0.38, bx1 - bx0 - 0.3, row_h * 0.76,
                f"{name}  :{by_name[name].port}" + ("  (bound)" if name == "FAULT" else ""),
                colour=COLOURS[name], size=9)

    # the client: one box the height of all lanes
    box(cx0, 0, cx1 - cx0, height, "client\n(confluent-kafka,\nSpark, Java)", size=10.5, weight="bold")

    # the fault proxy: one port per broker, level with that broker's FAULT row
    proxy_ports = {p.port: p for p in ports if p.node == "proxy"}
    fy = [row_y[(b.node_id, "FAULT")] for b in brokers]
    for b, y in zip(brokers, fy):
        port = b.fault_proxy_port
        assert port in proxy_ports
        box(px0, y - row_h * 0.42, px1 - px0, row_h * 0.84, f"fault proxy\nlistens :{port}", colour=COLOURS["FAULT"],
            fill="#fff3f0", size=8.5)
        # client -> proxy (the advertised FAULT address) -> the broker's bound FAULT port
        arrow(cx1, y, px0, y, COLOURS["FAULT"], ls="--")
        arrow(px1, y, bx0 + 0.15, y, COLOURS["FAULT"])
        ax.text((cx1 + px0) / 2, y + 0.08, f"FAULT advertised\n127.0.0.1:{port}", ha="center", va="bottom",
                fontsize=7.5, color=COLOURS["FAULT"])
        ax.text((px1 + bx0) / 2, y + 0.08, "forwards", ha="center", va="bottom", fontsize=7.5,
                color=COLOURS["FAULT"])
        for name in ("CLIENT", "TLS"):
            yy = row_y[(b.node_id, name)]
            arrow(cx1, yy, bx0 + 0.15, yy, COLOURS[name], ls="-" if name == "CLIENT" else ":")
        for name in ("CLIENT", "TLS"):
            ax.text((cx1 + px0) / 2, row_y[(b.node_id, name)] + 0.05, name, ha="center", va="bottom",
                    fontsize=7.5, color=COLOURS[name])

    # replication: INTERNAL to INTERNAL, on the right of the brokers
    iy = [row_y[(b.node_id, "INTERNAL")] for b in brokers]
    rx = bx1 + 0.45
    for y in iy:
        ax.plot([bx1 - 0.15, rx], [y, y], color=COLOURS["INTERNAL"], lw=1.6)
    ax.plot([rx, rx], [min(iy), max(iy)], color=COLOURS["INTERNAL"], lw=1.6)
    ax.text(rx + 0.08, (min(iy) + max(iy)) / 2 - lane_h / 2, "replication\n(INTERNAL,\nfollowers fetch)",
            ha="left", va="center", fontsize=8, color=COLOURS["INTERNAL"], rotation=0)

    # the controller(s): brokers register and fetch metadata on CONTROLLER
    ctrls = [p for p in ports if p.listener == "CONTROLLER"]
    ch = row_h * 1.6
    c_top = height
    for k, c in enumerate(ctrls):
        y0 = c_top - ch - k * (ch + 0.25)
        box(kx0, y0, kx1 - kx0, ch, f"controller {c.node}\nCONTROLLER :{c.port}", colour=COLOURS["CONTROLLER"],
            size=9, weight="bold")
    first = c_top - ch / 2
    for b in brokers:
        y = height - brokers.index(b) * (lane_h + lane_gap) - row_h / 2
        arrow(bx1, y, kx0, first, COLOURS["CONTROLLER"], ls="-.", rad=0.0, lw=1.2)
    ax.text(kx0 + (kx1 - kx0) / 2, c_top - ch - 0.25 - (len(ctrls) - 1) * (ch + 0.25),
            "brokers register and\nfetch __cluster_metadata;\nclients never connect here",
            ha="center", va="top", fontsize=8, color=COLOURS["CONTROLLER"])

    ax.text(0.2, -0.55, "solid: a direct connection   dashed red: through the fault proxy (bootstrap at a FAULT "
            "port; the metadata then names the proxy's ports)   dotted: TLS", fontsize=8, color="0.3", va="center")
    ax.set_title(f"The lab's listeners (port base {config.port_base()}) and the fault proxy (kafkalab.faults)",
                 fontsize=11.5)
    fig.tight_layout()
    return fig

"""``veriloco dashboard``: serve a read-only web page of a run, live from its chain (``veriloco.dashboard``)."""

from __future__ import annotations

from typing import Annotated

import typer

from veriloco.commands.common import Home, Network, key_names
from veriloco.commands.member import check_listen
from veriloco.commands.tx_flags import AFTER, merge
from veriloco.connect import TX, load_network, network_from_node
from veriloco.errors import CommandError
from veriloco.output import err_console


def dashboard(
    listen: Annotated[str, typer.Option(help="HOST:PORT to serve the page on")] = "127.0.0.1:8088",
    refresh: Annotated[float, typer.Option(min=0.5, help="seconds between the page's reads")] = 2.0,
    node: Annotated[str | None, typer.Option(
        "--node", help="gRPC URL of a node to read from instead of the network file's; with --contract, "
                       "no network file is needed")] = None,
    contract: Annotated[str | None, typer.Option("--contract", help="the run's contract address (with --node)")] = None,
    network: Network = None, home: Home = None,
) -> None:
    """Serve a web page of the run: epochs with phase and countdown, hosts' and validators' outcomes,
    slashes and rewards, the validation-loss curve and the funds audit, updating live. Read-only;
    for a network file (a simulation's too, while it runs) or a node and a contract."""
    merge({"node": node}, AFTER)
    if contract is not None and TX.node is None:
        raise CommandError("--contract needs --node (the node to read the run from)")
    net = network_from_node(TX.node, contract) if TX.node and contract else load_network(network, home)
    host, port = check_listen(listen)
    import uvicorn  # noqa: PLC0415 (FastAPI and uvicorn load only to serve)

    from veriloco.dashboard.app import make_app  # noqa: PLC0415 (as above)
    from veriloco.dashboard.source import RunSource  # noqa: PLC0415 (as above)

    source = RunSource(net, key_names(home), min_interval=min(1.0, refresh / 2))
    first = source.state()  # a run that cannot be read is one line now, not an empty page later
    err_console.print(f"dashboard of run {first.run.name} ({net.contract}) on http://{host}:{port}/ — Ctrl-C stops",
                      highlight=False)
    uvicorn.run(make_app(source, refresh), host=host, port=port, log_level="warning", limit_concurrency=64,
                timeout_keep_alive=5)

"""A local single-validator ``injectived`` devnet: a real Cosmos SDK chain with CosmWasm, for tests.

The node comes from the pinned PyPI package ``injective-core`` (the ``devnet`` extra; BUSL-1.1,
non-production use: never vendor the binary). Everything listens on 127.0.0.1 only, the EVM
JSON-RPC, pprof, pex, swagger and the other extras are off, blocks come every 200 ms, and the
node needs no network. What this module relies on about the node (the binary and its library
path, the genesis steps, the block-time flag, resource use) is in ``docs/devnet.md``, section
"Facts about the node".

    with Devnet(tmp_path / "devnet", ports=DevnetPorts.free(),
                accounts=[GenesisAccount.test("alice")]) as net:
        net.status().height          # the node is up, blocks are coming
        net.grpc_url                 # "grpc+http://127.0.0.1:<port>" for chain.cosmos
        net.stop(); net.start()      # restart on the same home: state is kept
    # leaving the block stops the node (SIGTERM, then SIGKILL); the node is tied to this process
    # (see ``tied`` in :meth:`Devnet.up`), so it stops even if this process is killed first

``up()`` wipes the home and builds a fresh genesis; ``start()`` runs the node on the existing
home. A devnet started by one process (``veriloco devnet up``) is found again by another through
the files in its home: ``devnet.json`` (chain id, ports, accounts), ``injectived.pid`` and
``injectived.log``. Such a node is *untied*: it outlives the process that started it. A *tied* node
(``up(tied=True)``, what tests and ``veriloco simulate`` use) gets SIGTERM when that process dies,
however it dies, through util-linux ``setpriv --pdeathsig``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from mnemonic import Mnemonic

from protocol.errors import VerilocoError
from protocol.injective import DENOM, GENESIS_BALANCE, MIN_GAS_PRICE, ONE_INJ
from protocol.keys import KeyType, PrivateKey

DEFAULT_CHAIN_ID = "veriloco-devnet-1"
DEFAULT_BLOCK_TIME = "200ms"
VALIDATOR_BALANCE = 10_000_000 * ONE_INJ
VALIDATOR_STAKE = 1_000_000 * ONE_INJ
DEFAULT_TEST_ACCOUNTS = ("test0", "test1", "test2", "test3")
STATE_FILE = "devnet.json"
PID_FILE = "injectived.pid"
LOG_FILE = "injectived.log"
DEVNET_QUERY_GAS_LIMIT = 100_000_000
"""Gas a smart query may use on the devnet (``[wasm] query_gas_limit``; wasmd's default is 3,000,000):
an epoch's whole `report` at 1,024 hosts needed more than the default before `report` was paged
(a page of ``REPORT_PAGE`` units is estimated well under it); kept raised so the benchmarks' devnet
reads run as they were measured."""
EXTRA_HINT = "install it with: pip install -e '.[devnet]'"
# keccak256 of the empty string: what `genesis add-genesis-account` writes as an EthAccount's code hash.
_EMPTY_CODE_HASH = "xdJGAYb3IzySfn2y3McDwOUAtlPKgic7e/rYBF2FpHA="

log = logging.getLogger(__name__)


class DevnetError(VerilocoError, RuntimeError):
    """The devnet could not be set up, started, found or stopped. ``str()`` is one line."""


class DevnetNotInstalled(DevnetError):
    """The ``devnet`` extra (``injective-core``) is not installed."""


def injectived_binary() -> Path:
    """The ``injectived`` executable from the ``injective-core`` package (unpacked on first use).

    The package unpacks its binary the first time it is asked, without a lock: a second process
    asking meanwhile could run a half-written file, or rewrite the one the first is running ("Text
    file busy"), which happened to two test workers of a fresh install. So the unpacking is
    serialised here by a lock file beside the binary: the first caller unpacks, the others wait
    and then find it whole.

    Raises:
        DevnetNotInstalled: the package is missing or has no binary for this platform.
    """
    try:
        import injective_core  # noqa: PLC0415 (optional dependency)
    except ImportError:
        raise DevnetNotInstalled(f"the devnet extra (injective-core) is not installed; {EXTRA_HINT}") from None
    try:
        bin_dir = Path(injective_core.__file__).resolve().parent / "bin"
        with open(bin_dir / ".unpack.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            return Path(injective_core.get_binary_path())
    except (FileNotFoundError, RuntimeError, OSError) as exc:
        raise DevnetNotInstalled(f"injective-core has no usable injectived binary: {exc}") from None


@functools.cache
def _setpriv() -> str | None:
    """util-linux ``setpriv`` if it is here and knows ``--pdeathsig`` (2.33+), else None.

    util-linux is Essential on Debian and Ubuntu; busybox's setpriv and macOS lack the option.
    """
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--help"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if b"--pdeathsig" in out.stdout + out.stderr else None


def _node_env(binary: Path) -> dict[str, str]:
    env = dict(os.environ)
    lib = str(binary.resolve().parent)  # libwasmvm.*.so lives beside the binary
    env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


# -- accounts --------------------------------------------------------------------------------------


def dev_mnemonic(name: str) -> str:
    """A deterministic 24-word BIP-39 mnemonic for a devnet test account. Public: tests only."""
    entropy = hashlib.sha256(b"veriloco-devnet-account:" + name.encode()).digest()
    return Mnemonic("english").to_mnemonic(entropy)


# Test accounts are Injective's default kind, so the mnemonic that `devnet accounts --mnemonics`
# prints recovers the funded account with `veriloco keys add --recover`, `injectived keys add
# --recover` or Keplr, all with their defaults.
DEV_KEY_TYPE = KeyType.ETH_SECP256K1


def dev_key(name: str) -> PrivateKey:
    """The key of :func:`dev_mnemonic`: ``eth_secp256k1`` on Injective's path m/44'/60'/0'/0/0."""
    return PrivateKey.from_mnemonic(dev_mnemonic(name), DEV_KEY_TYPE)


@dataclass(frozen=True)
class GenesisAccount:
    """An account funded in the genesis: ``coins`` maps denom to base units."""

    name: str
    address: str
    coins: Mapping[str, int] = field(default_factory=lambda: {DENOM: GENESIS_BALANCE})
    mnemonic: str | None = None  # only for deterministic test accounts, whose secrets are public
    key_type: str | None = None  # the account key's type where known (test accounts, keyring keys)

    @classmethod
    def test(cls, name: str, amount: int = GENESIS_BALANCE, **other_coins: int) -> GenesisAccount:
        """A deterministic test account (see :func:`dev_mnemonic`)."""
        return cls(name, dev_key(name).address(), {DENOM: amount, **other_coins}, dev_mnemonic(name),
                   DEV_KEY_TYPE.value)

    @classmethod
    def of_key(cls, name: str, key: PrivateKey, amount: int = GENESIS_BALANCE, **other_coins: int) -> GenesisAccount:
        return cls(name, key.address(), {DENOM: amount, **other_coins}, key_type=key.key_type.value)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address,
                "coins": {d: str(a) for d, a in sorted(self.coins.items())},
                **({"mnemonic": self.mnemonic} if self.mnemonic else {}),
                **({"key_type": self.key_type} if self.key_type else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GenesisAccount:
        return cls(data["name"], data["address"], {d: int(a) for d, a in data["coins"].items()},
                   data.get("mnemonic"), data.get("key_type"))


# -- ports ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DevnetPorts:
    """The node's four listeners, all on 127.0.0.1."""

    rpc: int = 26657
    p2p: int = 26656
    grpc: int = 9900
    rest: int = 10337

    def offset(self, n: int) -> DevnetPorts:
        """Every port shifted by ``n`` (several devnets side by side)."""
        return DevnetPorts(self.rpc + n, self.p2p + n, self.grpc + n, self.rest + n)

    @classmethod
    def free(cls) -> DevnetPorts:
        """Four ports the OS reports free right now (for tests; another process could still take one)."""
        socks = []
        try:
            for _ in range(4):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("127.0.0.1", 0))
                socks.append(s)
            return cls(*(s.getsockname()[1] for s in socks))
        finally:
            for s in socks:
                s.close()

    def items(self) -> list[tuple[str, int]]:
        return list(asdict(self).items())

    def taken(self) -> list[tuple[str, int]]:
        """The listeners whose port something else already holds on 127.0.0.1."""
        if len(set(asdict(self).values())) != 4:
            raise DevnetError(f"devnet ports must be distinct, got {self}")
        busy = []
        for name, port in self.items():
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                # Like the node's Go listeners: TIME_WAIT leftovers do not count, a listener does.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError as exc:
                    if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                        busy.append((name, port))
                    else:
                        raise
        return busy


# -- status -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DevnetStatus:
    running: bool
    home: str
    chain_id: str
    pid: int | None
    height: int | None
    endpoints: dict[str, str]
    block_time: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- TOML edits (line-based: the node's own files, known layout) -----------------------------------


def _set_toml(text: str, section: str, key: str, value: Any) -> str:
    """Set ``key`` in ``[section]`` ("" = top level) of a TOML text; the key must exist there."""
    literal = json.dumps(value) if isinstance(value, str) else ("true" if value is True else
                                                                "false" if value is False else str(value))
    lines = text.split("\n")
    current = ""
    for i, line in enumerate(lines):
        stripped = line.strip()
        header = re.fullmatch(r"\[([^\]]+)\]", stripped)
        if header:
            current = header.group(1)
            continue
        if current == section and re.match(rf"{re.escape(key)}\s*=", stripped):
            lines[i] = f"{key} = {literal}"
            return "\n".join(lines)
    raise DevnetError(f"injectived config has no {key!r} in [{section}]; is this injective-core 1.20.1?")


# -- the devnet -------------------------------------------------------------------------------------


class Devnet:
    """A single-validator injectived node in ``home``.

    Args:
        home: the node's home directory (wiped by :meth:`up`).
        ports: its listeners (default: injectived's usual ports).
        chain_id: the chain id.
        accounts: accounts funded at genesis (default: :data:`DEFAULT_TEST_ACCOUNTS`).
        block_time: CometBFT's commit timeout (``--unsafe-consensus-timeout-commit``); blocks come
            about 10 ms after it.
        log_level: the node's log level (``warn`` keeps the log small).
        block_max_gas: the consensus block gas limit written into the genesis (default: the
            genesis default of injectived, 10,000,000).
        query_gas_limit: the gas one smart query may use on this node (``[wasm] query_gas_limit``,
            default :data:`DEVNET_QUERY_GAS_LIMIT`; wasmd's own default is 3,000,000, what an
            operator's node that was not raised answers within).
    """

    def __init__(self, home: str | Path, *, ports: DevnetPorts | None = None,
                 chain_id: str = DEFAULT_CHAIN_ID, accounts: Iterable[GenesisAccount] | None = None,
                 block_time: str = DEFAULT_BLOCK_TIME, log_level: str = "warn",
                 block_max_gas: int | None = None, query_gas_limit: int = DEVNET_QUERY_GAS_LIMIT) -> None:
        self.home = Path(home).expanduser().absolute()
        self.ports = ports or DevnetPorts()
        self.chain_id = chain_id
        if accounts is None:
            accounts = [GenesisAccount.test(n) for n in DEFAULT_TEST_ACCOUNTS]
        self.accounts = list(accounts)
        names = [a.name for a in self.accounts]
        if len(set(names)) != len(names) or len({a.address for a in self.accounts}) != len(names):
            raise DevnetError("devnet account names and addresses must be unique")
        self.block_time = block_time
        self.log_level = log_level
        self.block_max_gas = block_max_gas
        if not isinstance(query_gas_limit, int) or isinstance(query_gas_limit, bool) or query_gas_limit <= 0:
            raise DevnetError(f"query_gas_limit must be a positive integer, got {query_gas_limit!r}")
        self.query_gas_limit = query_gas_limit
        self._proc: subprocess.Popen[bytes] | None = None
        self._tied = False  # what the last up()/start() asked for; start(tied=None) repeats it

    # -- finding a devnet again ---------------------------------------------------------------

    @classmethod
    def open(cls, home: str | Path) -> Devnet:
        """The devnet whose home is ``home`` (as written by :meth:`up`).

        Raises:
            DevnetError: ``home`` holds no devnet.
        """
        home = Path(home).expanduser().absolute()
        try:
            state = json.loads((home / STATE_FILE).read_text())
        except FileNotFoundError:
            raise DevnetError(f"no devnet in {home} (run `veriloco devnet up` first)") from None
        except (OSError, ValueError) as exc:
            raise DevnetError(f"{home / STATE_FILE} is unreadable: {exc}") from None
        return cls(home, ports=DevnetPorts(**state["ports"]), chain_id=state["chain_id"],
                   accounts=[GenesisAccount.from_json(a) for a in state["accounts"]],
                   block_time=state["block_time"], log_level=state.get("log_level", "warn"),
                   block_max_gas=state.get("block_max_gas"),
                   query_gas_limit=state.get("query_gas_limit", DEVNET_QUERY_GAS_LIMIT))

    # -- endpoints ----------------------------------------------------------------------------

    @property
    def grpc_url(self) -> str:
        """The gRPC endpoint in cosmpy's URL form."""
        return f"grpc+http://127.0.0.1:{self.ports.grpc}"

    @property
    def rpc_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.rpc}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.rest}"

    def connect(self, **options: Any) -> Any:
        """A :class:`chain.cosmos.CosmosChain` on this devnet (``options`` go to its constructor)."""
        from chain.cosmos import CosmosChain, injective  # noqa: PLC0415 (cosmpy only when needed)

        return CosmosChain(self.grpc_url, injective(self.chain_id), rpc_url=self.rpc_url, **options)

    def endpoints(self) -> dict[str, str]:
        return {"rpc": self.rpc_url, "grpc": self.grpc_url, "rest": self.rest_url,
                "p2p": f"tcp://127.0.0.1:{self.ports.p2p}"}

    @property
    def tied(self) -> bool:
        """Whether the node was (or will be, on ``start()``) started tied to this process."""
        return self._tied

    @property
    def log_path(self) -> Path:
        return self.home / LOG_FILE

    @property
    def pid_path(self) -> Path:
        return self.home / PID_FILE

    def account(self, name: str) -> GenesisAccount:
        for a in self.accounts:
            if a.name == name:
                return a
        raise DevnetError(f"the devnet has no account named {name!r}")

    # -- lifecycle ----------------------------------------------------------------------------

    def up(self, timeout: float = 60.0, progress: Callable[[str], None] | None = None, *,
           tied: bool | None = None) -> DevnetStatus:
        """Wipe the home, write a fresh genesis and configuration, start the node, wait for block 1.

        Args:
            timeout: seconds to wait for the first block.
            progress: told each step as it starts, in words.
            tied: the node gets SIGTERM when the thread that started it dies (the process, when it
                is the main thread), however it dies, SIGKILL included: for tests and simulations,
                whose ``finally`` may never run. Untied, it outlives this process (``veriloco devnet
                up``). None: as the last ``up``/``start`` of this object (untied at first). Without
                util-linux ``setpriv`` the node runs untied and a warning is logged. Linux ties the
                node to the *thread* that forks it, not the process, so only a start from the main
                thread is tied; a start from a worker thread (a restart from a helper thread) runs
                untied rather than die with that thread.

        Raises:
            DevnetNotInstalled: the ``devnet`` extra is missing.
            DevnetError: a port is taken, the node is already running, or it did not start.
        """
        say = progress or (lambda _: None)
        binary = injectived_binary()
        if self.pid() is not None:
            raise DevnetError(f"a devnet is already running from {self.home} (pid {self.pid()}); "
                              "stop it first (`veriloco devnet down`)")
        self._check_ports()
        say(f"wiping {self.home} and writing a genesis with {len(self.accounts)} funded accounts")
        self._wipe()
        self._init(binary)
        return self.start(timeout=timeout, progress=progress, tied=tied)

    def start(self, timeout: float = 60.0, progress: Callable[[str], None] | None = None, *,
              tied: bool | None = None) -> DevnetStatus:
        """Start the node on its existing home (state kept) and wait until it produces blocks.

        Args:
            timeout: seconds to wait for the next block.
            progress: told each step as it starts, in words.
            tied: as in :meth:`up`; None repeats the last ``up``/``start`` of this object (so a
                tied devnet restarts tied), untied at first (``Devnet.open(home).start()``).
        """
        say = progress or (lambda _: None)
        binary = injectived_binary()
        if not (self.home / "config" / "genesis.json").is_file():
            raise DevnetError(f"no devnet in {self.home} (run `veriloco devnet up` first)")
        if (pid := self.pid()) is not None:
            raise DevnetError(f"a devnet is already running from {self.home} (pid {pid})")
        self._check_ports()
        start_height = self._last_height_on_disk()
        if tied is not None:
            self._tied = tied
        argv = [str(binary), "start", "--home", str(self.home),
                "--unsafe-consensus-timeout-commit", self.block_time, "--log-level", self.log_level,
                "--log-no-color"]
        if self._tied and threading.current_thread() is not threading.main_thread():
            # The kernel ties the node to the thread that forks it: started from a worker thread
            # (a test that restarts the node from a helper thread) it would die with that thread.
            log.info("the devnet in %s is started from a worker thread: untied this time", self.home)
        elif self._tied:
            setpriv = _setpriv()
            if setpriv is None:
                log.warning("util-linux setpriv (with --pdeathsig) is not installed: the devnet in %s runs "
                            "untied and outlives this process if it is killed; stop it with "
                            "`veriloco devnet down --node-home %s`", self.home, self.home)
            else:
                # setpriv sets PR_SET_PDEATHSIG and then execs injectived: same pid, so the pid file,
                # pid(), status() and stop() see the node itself. The kernel sends the signal when the
                # *thread* that forked dies (Popen forks from the calling thread). The flag survives
                # the exec (injectived is not set-uid), and start_new_session does not clear it. Only
                # a starter that dies in the instant between the fork and setpriv's prctl misses it.
                argv = [setpriv, "--pdeathsig", "SIGTERM", "--", *argv]
        node_log = open(self.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL, stdout=node_log, stderr=subprocess.STDOUT, env=_node_env(binary),
                start_new_session=True,  # ^C in a shell does not hit it; untied, it survives the CLI that started it
            )
        finally:
            node_log.close()
        self.pid_path.write_text(f"{self._proc.pid}\n")
        say(f"started injectived (pid {self._proc.pid}); waiting up to {timeout:g} s for block "
            f"{max(1, start_height + 1)} (log: {self.log_path})")
        self._wait_ready(timeout, min_height=max(1, start_height + 1))
        return self.status()

    def stop(self, timeout: float = 15.0) -> bool:
        """Stop the node: SIGTERM, then SIGKILL after ``timeout`` seconds. False if it was not running."""
        pid = self.pid()
        if pid is None:
            self.pid_path.unlink(missing_ok=True)
            self._proc = None
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not self._wait_exit(pid, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._wait_exit(pid, 10.0)
        self.pid_path.unlink(missing_ok=True)
        self._proc = None
        return True

    down = stop

    def __enter__(self) -> Devnet:
        # Tied: the block's owner bounds the node's life, even when it is killed before __exit__.
        self.up(tied=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- status -------------------------------------------------------------------------------

    def pid(self) -> int | None:
        """The node's pid if it is running from this home (a stale pid file counts as not running)."""
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None
        try:
            pid = int(self.pid_path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _is_our_node(pid, self.home) else None

    def height(self, timeout: float = 2.0) -> int | None:
        """The latest block height from the node's RPC, or None when it does not answer."""
        try:
            r = httpx.get(f"{self.rpc_url}/status", timeout=timeout)
            r.raise_for_status()
            return int(r.json()["result"]["sync_info"]["latest_block_height"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    def status(self) -> DevnetStatus:
        pid = self.pid()
        return DevnetStatus(running=pid is not None, home=str(self.home), chain_id=self.chain_id, pid=pid,
                            height=self.height() if pid is not None else None, endpoints=self.endpoints(),
                            block_time=self.block_time)

    def consensus_params(self) -> dict[str, Any]:
        """The node's current consensus params (block max gas and bytes, ...), from its RPC."""
        r = httpx.get(f"{self.rpc_url}/consensus_params", timeout=5.0)
        r.raise_for_status()
        params: dict[str, Any] = r.json()["result"]["consensus_params"]
        return params

    def block_max_gas_limit(self) -> int:
        """The block gas limit the node enforces (-1 = unlimited)."""
        return int(self.consensus_params()["block"]["max_gas"])

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    # -- internals ----------------------------------------------------------------------------

    def _check_ports(self) -> None:
        busy = self.ports.taken()
        if busy:
            what = ", ".join(f"{name} {port}" for name, port in busy)
            raise DevnetError(f"port{'s' if len(busy) > 1 else ''} already in use on 127.0.0.1: {what}; "
                              "stop what holds them or choose other ports (--port-offset, --rpc-port, ...)")

    def _wipe(self) -> None:
        if self.home.exists():
            if not self.home.is_dir():
                raise DevnetError(f"{self.home} exists and is not a directory")
            entries = list(self.home.iterdir())
            ours = (self.home / STATE_FILE).exists() or (self.home / "config" / "genesis.json").exists()
            if entries and not ours:
                raise DevnetError(f"{self.home} is not empty and holds no devnet; refusing to wipe it")
            shutil.rmtree(self.home)
        self.home.mkdir(parents=True, mode=0o700)

    def _run(self, binary: Path, *args: str, stdin: bytes | None = None) -> str:
        proc = subprocess.run([str(binary), *args, "--home", str(self.home)], input=stdin, capture_output=True,
                              env=_node_env(binary), timeout=60)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
            raise DevnetError(f"injectived {args[0]} {args[1] if len(args) > 1 else ''} failed: "
                              f"{detail[-1] if detail else 'exit ' + str(proc.returncode)}")
        return proc.stdout.decode()

    def _init(self, binary: Path) -> None:
        self._run(binary, "init", "veriloco-devnet", "--chain-id", self.chain_id)
        # The validator's operator key: Injective's own eth_secp256k1, in the node's test keyring.
        self._run(binary, "keys", "add", "validator", "--keyring-backend", "test", "--output", "json")
        validator = self._run(binary, "keys", "show", "validator", "-a", "--keyring-backend", "test").strip()
        if validator in {a.address for a in self.accounts}:
            raise DevnetError("a genesis account collides with the validator's address")
        self._write_genesis(validator)
        self._run(binary, "genesis", "gentx", "validator", f"{VALIDATOR_STAKE}{DENOM}", "--chain-id", self.chain_id,
                  "--keyring-backend", "test", "--moniker", "veriloco-devnet")
        self._run(binary, "genesis", "collect-gentxs")
        self._run(binary, "genesis", "validate")
        self._write_config()
        state = {"chain_id": self.chain_id, "ports": asdict(self.ports), "block_time": self.block_time,
                 "log_level": self.log_level, "block_max_gas": self.block_max_gas,
                 "query_gas_limit": self.query_gas_limit,
                 "validator": validator, "accounts": [a.to_json() for a in self.accounts]}
        (self.home / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n")

    def _write_genesis(self, validator: str) -> None:
        path = self.home / "config" / "genesis.json"
        genesis = json.loads(path.read_text())
        app = genesis["app_state"]
        # REQUIRED: without it InitChain panics ("invalid coin denomination: got inj, expected stake").
        app["staking"]["params"]["bond_denom"] = DENOM
        # Harmless and tidy: every denom is inj, no inflation (balances only move by transactions
        # and fees), short governance periods.
        app["mint"]["params"]["mint_denom"] = DENOM
        for k in ("inflation_rate_change", "inflation_max", "inflation_min"):
            app["mint"]["params"][k] = "0.000000000000000000"
        app["mint"]["minter"]["inflation"] = "0.000000000000000000"
        app["crisis"]["constant_fee"]["denom"] = DENOM
        gov = app["gov"]["params"]
        for coin in gov.get("min_deposit", []) + gov.get("expedited_min_deposit", []):
            coin["denom"] = DENOM
        gov["max_deposit_period"] = gov["voting_period"] = "30s"
        if "expedited_voting_period" in gov:
            gov["expedited_voting_period"] = "15s"
        if self.block_max_gas is not None:
            genesis["consensus"]["params"]["block"]["max_gas"] = str(self.block_max_gas)
        # Accounts, written as `genesis add-genesis-account` writes them (one subprocess per account
        # would cost 0.2 s each). Injective's account type is EthAccount around a BaseAccount.
        funded = [(validator, {DENOM: VALIDATOR_BALANCE})] + [(a.address, dict(a.coins)) for a in self.accounts]
        supply: dict[str, int] = {c["denom"]: int(c["amount"]) for c in app["bank"]["supply"]}
        for address, coins in funded:
            app["auth"]["accounts"].append({
                "@type": "/injective.types.v1beta1.EthAccount",
                "base_account": {"address": address, "pub_key": None, "account_number": "0", "sequence": "0"},
                "code_hash": _EMPTY_CODE_HASH,
            })
            positive = {d: a for d, a in sorted(coins.items()) if a > 0}
            app["bank"]["balances"].append(
                {"address": address, "coins": [{"denom": d, "amount": str(a)} for d, a in positive.items()]})
            for d, a in positive.items():
                supply[d] = supply.get(d, 0) + a
        app["bank"]["supply"] = [{"denom": d, "amount": str(a)} for d, a in sorted(supply.items())]
        path.write_text(json.dumps(genesis, indent=1))

    def _write_config(self) -> None:
        p = self.ports
        config = self.home / "config" / "config.toml"
        text = config.read_text()
        for section, key, value in [
            ("rpc", "laddr", f"tcp://127.0.0.1:{p.rpc}"),
            ("rpc", "pprof_laddr", ""),
            ("p2p", "laddr", f"tcp://127.0.0.1:{p.p2p}"),
            ("p2p", "pex", False),
            ("p2p", "addr_book_strict", False),
            ("p2p", "seeds", ""),
            ("p2p", "persistent_peers", ""),
            ("consensus", "timeout_commit", self.block_time),  # ignored by Injective; the start flag rules
            ("instrumentation", "prometheus", False),
            ("tx_index", "indexer", "kv"),
        ]:
            text = _set_toml(text, section, key, value)
        config.write_text(text)

        app = self.home / "config" / "app.toml"
        text = app.read_text()
        for section, key, value in [
            ("", "minimum-gas-prices", f"{MIN_GAS_PRICE}{DENOM}"),
            ("api", "enable", True),
            ("api", "swagger", False),
            ("api", "address", f"tcp://127.0.0.1:{p.rest}"),
            ("api", "enabled-unsafe-cors", False),
            ("grpc", "enable", True),
            ("grpc", "address", f"127.0.0.1:{p.grpc}"),
            ("grpc-web", "enable", False),
            ("json-rpc", "enable", False),
            ("json-rpc", "enable-indexer", False),
            ("json-rpc-debug", "enable", False),
            ("injective-websocket", "address", ""),
            ("chainstream", "server", ""),
        ]:
            text = _set_toml(text, section, key, value)
        # wasmd bounds a smart query at 3,000,000 gas by default; the operator's `report` of an epoch
        # reads the whole epoch and needs more from 256 hosts on (docs/benchmarks.md, "Paged
        # settlement"). A node's own setting, not consensus: this devnet serves its operator.
        if "\n[wasm]\n" not in text:
            text += f"\n[wasm]\nquery_gas_limit = {self.query_gas_limit}\n"
        app.write_text(text)

    def _last_height_on_disk(self) -> int:
        try:
            state = json.loads((self.home / "data" / "priv_validator_state.json").read_text())
            return int(state.get("height", 0))
        except (FileNotFoundError, ValueError):
            return 0

    def _wait_ready(self, timeout: float, min_height: int) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                self.pid_path.unlink(missing_ok=True)
                raise DevnetError(f"injectived exited with status {code} while starting: "
                                  f"{_last_error(self.log_tail(40))} (log: {self.log_path})")
            height = self.height(timeout=1.0)
            if height is not None and height >= min_height and _port_open(self.ports.grpc):
                return
            time.sleep(0.05)
        self.stop()
        raise DevnetError(f"the devnet produced no block within {timeout:.0f} s (log: {self.log_path})")

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                try:
                    self._proc.wait(timeout=0.05)
                    return True
                except subprocess.TimeoutExpired:
                    continue
            if not _alive(pid):
                return True
            time.sleep(0.05)
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is not running
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return True


def _is_our_node(pid: int, home: Path) -> bool:
    """Whether ``pid`` is an injectived started on ``home`` (guards against a recycled pid)."""
    if not _alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc (macOS): trust the pid file
    # argv[0] is setpriv only in the instant before it execs a tied node (same pid, see Devnet.start).
    launcher = bool(argv) and Path(os.fsdecode(argv[0])).name == "setpriv" and any(b"injectived" in a for a in argv)
    return (any(b"injectived" in a for a in argv[:1]) or launcher) and str(home).encode() in argv


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _last_error(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if any(w in ln.lower() for w in ("error", "panic", "failed", "address already in use")):
            return ln[:300]
    return lines[-1][:300] if lines else "no log output"


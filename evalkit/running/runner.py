"""The sampling engine: k samples per case and arm, under the cost cap, resumable.

`run_suite` renders each (case, arm) with `suite.render_prompt`, calls the unit through
`ModelClient` for every sample index with its own derived seed, and appends each
finished sample to the run folder as it lands. It stops dispatching when the ledger
refuses a reservation (budget exhausted) or a response breaches a ceiling; samples that
did not run have no line, and the summary starts with ``INCOMPLETE: ...``.

Resume (`resume=RUN_DIR`) reads `results.jsonl` and the ledger, runs only the missing
(case, arm, index) keys, and carries the spend forward (calls left in flight by a killed
run count as spent), so a finished key is never paid twice and the cap covers the whole
run. It refuses when the suite's config, a template, an arm's guidance or the cases
changed since the run started (hashes in the run's `config.json`). A run holds the run
folder's lock (`RunFolder.lock`) and the runs folder's (`runs.runs_dir_lock`) from start
to end: a second process on the same folder, or a second run in the same runs folder
(which would share its response cache and pay again for what the first has in flight),
is refused before it calls anything.

Two arms that differ only by name (`request_identity`: the same model, endpoint,
parameters, templates, guidance and skill) derive their seeds from one name (`seed_names`:
the first such arm's), so they send the same requests: with the response cache on, each
goes out once in a run and the twin replays its answer ($0, counted as avoided at its own
price), and a later run replays both; an agent unit's twins share each model call the
same way (`twin_share`: by sample, call ordinal and request). Arms that differ in
anything else, a model above all, never share an answer: the model and every parameter
are in the request and its cache key. The names are recorded in the run's `config.json`
(`seed_names`); a run folder without them (from before) derives each arm's seeds from
its own name on resume, as it did when it started.

Keys are drawn lazily from one iterator by `concurrency` workers, so the tasks (and the
memory) of a run do not grow with k x cases.

With `batch` (`evalkit run --batch`), the missing keys go to the provider's Batch API
instead, on the same ledger (`evalkit.running.batch`), one batch per (endpoint, model,
price) group of arms, each reserved at its own batch price; a resume with or without it first
collects the batches an earlier session left open.

Once the run stops (ceiling breached, budget exhausted, endpoint unreachable or
endlessly rate-limiting, disk full, the watched model server exited), no further paid
call goes out: the dispatcher checks before every key and the client before every
attempt and during its backoff. The INCOMPLETE reason names every stop cause that
occurred, a ceiling breach always first, then what made the run impossible to go on
(`endpoint unreachable: <url> (<cause>)`, `disk full: <file> (<error>)`, `rate limited:
<url> (...)`), and `summary.json` counts `ceiling_breaches` and `untrusted_usage`. A
full disk frees the run folder's `.space-reserve` so the summary is still written;
terminal lines and the INCOMPLETE line are `printable`. A watch (`run_suite(watch=...)`,
and the server `evalkit serve` runs, see `endpoints`) that reports stops the run the
same way: its first line is the cause, the rest (a dead server's log tail)
`stop_detail`, shown under the INCOMPLETE line in `summary.md` and on stderr.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import gc
import hashlib
import json
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tqdm import tqdm

from evalkit.calls.cache import InFlight, ResponseCache
from evalkit.calls.client import CallStopped, ModelClient, check_endpoint, request_hash
from evalkit.calls.ledger import Ledger, role_spend, spend_by_arm
from evalkit.calls.sandbox import NOT_CONTAINED
from evalkit.calls.serve import LOCAL_MODEL_ALIAS, LocalModelServer, default_model_path
from evalkit.calls.stopping import StopSignal
from evalkit.foundations._text import printable
from evalkit.foundations.errors import (
    BudgetExhausted,
    CeilingBreached,
    DiskFull,
    EvalkitError,
    InputError,
    InputTooLong,
    ReplayMiss,
    UnitCallError,
)
from evalkit.foundations.layout import BATCHES, CACHE_FILE
from evalkit.foundations.records import Arm, CaseTable, Config, Endpoint, Executor, Plan, Sample, Suite
from evalkit.numbers import metrics
from evalkit.runfolder.runs import RunFolder, runs_dir_lock, stopping_line, write_atomic
from evalkit.running import until_decided
from evalkit.suites.endpoints import (
    Watch,
    cache_identity,
    combine,
    resolve_base_url,
    scripted_answers,
    served_watch,
)

if TYPE_CHECKING:
    from evalkit.calls.session import TwinShare
    from evalkit.running import batch as batches

Key = tuple[str, str, int]


@dataclass(frozen=True)
class RunResult:
    """What a run did. `ran`/`total` count cases (a case ran when all its samples in
    every arm finished); `exit_code` is 0 when complete, 1 when INCOMPLETE."""

    path: Path
    complete: bool
    ran: int
    total: int
    samples_ran: int
    samples_total: int
    reason: str | None
    spend_usd: float
    avoided_usd: float
    cap_usd: float
    per_arm: dict[str, dict[str, Any]]
    exit_code: int
    privacy: dict[str, Any] = dataclasses.field(default_factory=dict)  # config.json's record (evalkit.pii.privacy)
    stop_detail: str | None = None  # what a watch said beyond the cause (a dead server's log tail)

    error_reasons: tuple[str, ...] = ()  # the first distinct errors of samples without a result (at most 3)
    stopping: dict[str, Any] | None = None  # summary.json's `stopping` block (until_decided.StopRecord)

    @property
    def incomplete_line(self) -> str | None:
        return None if self.complete else f"INCOMPLETE: {self.ran}/{self.total} cases ({self.reason})"


MAX_ERROR_REASONS = 3


def error_reasons(lines: list[dict[str, Any]], without: set[Key], limit: int = MAX_ERROR_REASONS) -> tuple[str, ...]:
    """The first `limit` distinct reasons among `errors.jsonl` `lines` for samples not in
    `without` (those with a result): each error with its sample's own labels (``case/arm/i:``,
    ``case/arm/i#n:``, ``call n:``, ``attempt n:``) taken out, so samples that failed the
    same way show one reason."""
    out: list[str] = []
    for e in lines:
        key = (str(e.get("case_id")), str(e.get("arm")), int(e.get("index", -1)))
        if key in without:
            continue
        label = re.escape(f"{key[0]}/{key[1]}/{key[2]}")
        text = re.sub(rf"{label}(#\d+)?: |\b(call|attempt) \d+: ", "", str(e.get("error", "")))
        if text not in out:
            out.append(text)
            if len(out) >= limit:
                break
    return tuple(out)


@dataclass(frozen=True)
class RunOptions:
    """How to run a suite: built once by the caller (`evalkit run` from its flags,
    `run_suite` from its keyword arguments) and handed down whole, so that adding an
    option is one field here. `arms`/`k` default to the config's (a resume takes the
    run's); `base_url` overrides `EVALKIT_BASE_URL` and the config's generator URL;
    `resume` is a run folder to finish (`until_decided` says whether it carries on the
    sequence or completes the fixed design); `cache=False` neither reads nor writes the
    response cache; `sample_files=False` skips the per-sample text files; `watch` is
    asked before every sample and attempt (`endpoints`); `batch` sends the missing keys
    through the provider's Batch API (`evalkit.running.batch`); `executor` (`evalkit run --ray`)
    runs each sample (any unit kind) as a Ray task (`evalkit.running.executors`)."""

    arms: list[str] | None = None
    k: int | None = None
    runs_dir: str | Path | None = None
    base_url: str | None = None
    resume: str | Path | None = None
    replay_only: bool = False
    progress: bool = True
    cache: bool = True
    sample_files: bool = True
    allow_private_data: bool = False
    watch: Watch | None = None
    batch: batches.BatchOptions | None = None
    executor: Executor | None = None  # where samples run; None: the config's (`evalkit.running.executors`)
    # `--until-decided` (True) / `--no-until-decided` (False): stop once the plan's sequential
    # test decided, or run the fixed design; None: the config's `stopping`
    until_decided: bool | None = None
    simulator_base_url: str | None = None  # a conversation suite's simulator (`evalkit.conversations`)


SIMULATOR_SEED_NAME = "\x00simulator"  # what the simulator's seeds derive from in place of an arm


SAME_ERROR_STOP = 3  # the first samples failing with one not-retried error that stop a run


def derive_seed(config_seed: int | None, case_id: str, arm: str, index: int) -> int:
    """A sample's seed: a stable hash of (config seed, case id, arm, index), below 2**31
    so every server accepts it. Stable across processes and Python versions."""
    raw = f"{config_seed if config_seed is not None else 0}\x1f{case_id}\x1f{arm}\x1f{index}"
    return int.from_bytes(hashlib.sha256(raw.encode("utf-8")).digest()[:8], "big") % (2**31 - 1)


def request_identity(config: Config, arm: Arm, url: str | None) -> tuple[Any, ...]:
    """What an arm's requests are made of, its name aside: the model and the endpoint
    its calls go to, its sampling parameters and output ceiling, its templates, unit,
    guidance and skill (everything `Config.for_arm` and `render_prompt` read). Two arms
    with one identity send the same requests."""
    c = config.for_arm(arm)
    g = c.generator
    where = cache_identity(g, url) if url else g.base_url
    return (g.model, where, c.temperature, c.top_p, c.seed, c.max_tokens_out, c.template, c.system, c.unit) + (
        arm.guidance,
        arm.skill_dir,
        arm.skill,
    )


def seed_names(config: Config, urls: dict[str, str | None]) -> dict[str, str]:
    """The name each arm's seeds are derived from (`derive_seed`): the first arm of the
    config (in its order) with the same `request_identity`, so two arms that differ only
    by name send the same requests and share their answers (in one run, and across runs
    through the response cache), while every other arm keeps its own name and the seeds
    it always had. `urls` is where each arm's calls go (`arm_base_url`); an arm not in it
    is matched at its config's URL."""
    first: list[tuple[tuple[Any, ...], str]] = []
    out: dict[str, str] = {}
    for a in config.arms:
        ident = request_identity(config, a, urls.get(a.name, config.for_arm(a).generator.base_url))
        # a list scanned by equality: an identity holds records, not all of them hashable
        out[a.name] = next((name for other, name in first if other == ident), a.name)
        if out[a.name] == a.name:
            first.append((ident, a.name))
    return out


def config_snapshot(config: Config) -> dict[str, Any]:
    """The config as JSON: the file's own text when loaded from one, else the record."""
    if config.raw:
        return dict(config.raw)
    d = dataclasses.asdict(config)
    d.pop("raw", None)
    out: dict[str, Any] = json.loads(json.dumps(d, default=str))
    return out


def config_hash(snapshot: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(snapshot, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def input_hashes(suite: Suite, arms: list[Arm]) -> dict[str, str]:
    """sha256 of each text the unit's inputs are rendered from: the prompt template, the
    system template, each run arm's guidance and skill, the cases and an agent unit's
    program files (`evalkit.running.agents.program_files`). Stored in the run's
    `config.json` so a resume can name what changed (config.json alone does not hold
    these texts)."""

    def sha(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    config = suite.config
    raw = config.raw or {}
    out = {f"prompt template ({raw.get('template', 'prompt.txt')})": sha(config.template)}
    if config.system is not None:
        out[f"system template ({raw.get('system') or 'system.txt'})"] = sha(config.system)
    for a in arms:
        out[f"guidance of arm {a.name!r} ({a.guidance_file or 'none'})"] = sha(a.guidance or "")
        if a.skill_dir:
            out[f"skill of arm {a.name!r} ({a.skill_dir})"] = sha(a.skill or "")
        for what, name in (("template", "prompt template"), ("system", "system template")):
            if what in a.overrides:  # an arm's own prompt or system file
                text = getattr(a, what)
                out[f"{name} of arm {a.name!r} ({getattr(a, what + '_file') or 'none'})"] = sha(text or "")
    if config.simulator is not None:  # the simulated user's prompt: a changed one is a new run
        out[f"simulator prompt ({config.simulator.prompt_file})"] = sha(config.simulator.prompt)
    cases = [{k: v for k, v in dataclasses.asdict(c).items() if k != "line"} for c in suite.cases]
    out["cases"] = sha(json.dumps(cases, sort_keys=True, ensure_ascii=False, default=str))
    from evalkit.running.agents import program_files  # the agent program under test: a changed one is a new run

    root = Path(suite.path).resolve()
    for p in program_files(suite):
        out[f"agent program ({p.relative_to(root).as_posix()})"] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _changed_inputs(before: dict[str, str], now: dict[str, str]) -> list[str]:
    return [name for name in list(before) + [n for n in now if n not in before] if before.get(name) != now.get(name)]


def _stopping_md(res: dict[str, Any]) -> list[str]:
    """summary.md's paragraph on a run that stopped before the fixed design's end (first,
    under the title), with what it spent and what the fixed design would have; none else."""
    stopped = stopping_line(res)
    if not stopped:
        return []
    stop = res["stopping"]
    return [
        f"**{stopped[0].upper()}{stopped[1:]}**: {printable(str(stop['reason']))}; spent "
        f"${stop['spend_usd']:.6f} on {stop['calls']} calls, the fixed design's {stop['fixed_calls']} "
        f"calls ${stop['fixed_usd']:.6f} (at each arm's list price per call, the cache's hits included).",
        "",
    ]


def _format_summary_md(suite: Suite, res: dict[str, Any]) -> str:
    lines = []
    if not res["complete"]:
        lines.append(printable(f"INCOMPLETE: {res['ran']}/{res['total']} cases ({res['reason']})"))
        for why in res.get("error_reasons") or ():
            lines.append("")
            lines.append(printable(f"- error: {why}"))
        if res.get("stop_detail"):
            lines.append("")
            lines.extend("    " + printable(line) for line in res["stop_detail"].splitlines())
        for t in res.get("stderr_tails") or ():
            lines += ["", printable(f"- stderr of {t['sample']} (last lines):"), ""]
            lines.extend("    " + printable(line) for line in t["tail"].splitlines())
        lines.append("")
    lines.append(f"# Run of {suite.name}")
    lines.append("")
    lines += _stopping_md(res)
    if res.get("isolation") == "none":
        lines.append(f"**{NOT_CONTAINED}**")
        lines.append("")
    lines.append(f"- cases complete: {res['ran']}/{res['total']}; samples: {res['samples_ran']}/{res['samples_total']}")
    lines.append(
        f"- spend: ${res['spend_usd']:.6f} of cap ${res['cap_usd']:.6f}"
        f" (avoided by the cache: ${res['avoided_usd']:.6f})"
        + (
            f"; ${res['in_flight_usd']:.6f} of it is the worst case of batches still running"
            if res.get("in_flight_usd")
            else ""
        )
    )
    lines.append("")
    lines.append("| arm | model | samples | errors | paid | avoided | paid per case |")
    lines.append("|---|---|---:|---:|---:|---:|---:|")
    for arm, c in res["per_arm"].items():
        lines.append(
            f"| {arm} | {printable(str(c.get('model', '')))} | {c['samples']} | {c['errors']} "
            f"| ${c.get('paid_usd', 0.0):.6f} | ${c.get('avoided_usd', 0.0):.6f} "
            f"| ${c.get('paid_per_case_usd', 0.0):.6f} |"
        )
    return "\n".join(lines) + "\n"


class _Engine:
    def __init__(
        self,
        suite: Suite,
        arms: list[Arm],
        folder: RunFolder,
        ledger: Ledger,
        client: ModelClient,
        rcache: ResponseCache | None,
        pending: int,
        progress: bool,
        prompts: dict[tuple[str, str], Any],
        watch: Watch | None = None,
        clients: dict[str, ModelClient] | None = None,
        seeds: dict[str, str] | None = None,
    ) -> None:
        self.config = suite.config
        # Each arm's config (`Config.for_arm`) and client: arms on one model, endpoint and
        # price share a client; all share the one ledger and the one response cache.
        self.arm_configs = {a.name: suite.config.for_arm(a) for a in arms}
        self.clients = clients or {a.name: client for a in arms}
        self.cases = {c.id: c for c in suite.cases}
        self.arms = {a.name: a for a in arms}
        self.stderr_tails: list[dict[str, str]] = []  # the first errored programs' (`stderr_tails`)
        self.folder = folder
        self.ledger = ledger
        self.client = client
        self.rcache = rcache
        # The name each arm's seeds derive from (`seed_names`); arms sharing one send the
        # same requests: with a response cache, each such request goes out once per run
        # (`_first_of_twins`), its twins replay its answer at $0.
        self.seed_names = {a.name: (seeds or {}).get(a.name, a.name) for a in arms}
        shared_names = collections.Counter(self.seed_names.values())
        self.twins = {a for a, s in self.seed_names.items() if shared_names[s] > 1} if rcache is not None else set()
        self.in_flight = InFlight()  # a twin's call waits for its first arm's identical call
        # why the run stops (evalkit.calls.stopping): the clients ask it before every attempt
        self.signal = StopSignal(ledger, rcache, self.clients, watch)
        self.errored: dict[Key, str] = {}
        # Counts, not sets of keys: memory stays flat however many samples a run has.
        self.done_per_arm: collections.Counter[str] = collections.Counter()
        self.done_per_case: collections.Counter[str] = collections.Counter()
        self.prompts = prompts
        self._tools = list(self.config.tools) or None
        self._stop = list(self.config.stop) or None
        self._concurrency = self.config.concurrency
        self.agents: Any = None  # an agents.AgentRunner for agent, command and python units
        self.arm_agents: dict[str, Any] = {}  # each arm's AgentRunner (its own unit and client)
        self.remote: Any = None  # an evalkit.running.executors.RayExecutor when samples run on Ray
        self.requeued: set[Key] = set()  # keys run again after their Ray node died (once each)
        self.remote_prompts: Any = None  # an evalkit.running.executors.RemotePrompts: prompt samples on Ray
        self.watcher: Any = None  # an until_decided.SequentialStop / PerCaseStop: told of every sample
        self.conversations: dict[str, Any] = {}  # each arm's evalkit.conversations.loop.ConversationRunner
        self.first_causes: list[str] = []  # the not-retried causes of the samples that failed before any finished
        self.bar = tqdm(
            total=pending,
            disable=not progress,
            unit="sample",
            dynamic_ncols=True,
            desc=printable(suite.name),
            file=sys.stderr,
        )

    @property
    def done(self) -> int:
        return sum(self.done_per_arm.values())

    @property
    def stop_causes(self) -> list[str]:
        """The stop causes so far, in the order they occurred (`StopSignal.causes`)."""
        return self.signal.causes

    @property
    def stop_detail(self) -> str | None:
        """What the watch said beyond the cause (a dead server's log tail)."""
        return self.signal.detail

    @property
    def stop_reason(self) -> str | None:
        """Every stop cause that occurred, ranked; None while the run goes on (`StopSignal.reason`)."""
        return self.signal.reason

    def stop(self, cause: str) -> None:
        """Record a stop cause once (`StopSignal.stop`)."""
        self.signal.stop(cause)

    def should_stop(self) -> str | None:
        """The stop reason with what the ledger, cache and clients found (`StopSignal.should_stop`)."""
        return self.signal.should_stop()

    def client_of(self, arm_name: str) -> ModelClient:
        """The client an arm's calls go through (its model, endpoint and price)."""
        return self.clients[arm_name]

    def seed_of(self, key: Key) -> int:
        """A key's derived seed, from its arm's seed (the suite's unless the arm sets one)
        and its arm's seed name (`seed_names`: the arm's own, unless an earlier arm sends
        the same requests)."""
        case_id, arm_name, index = key
        return derive_seed(self.arm_configs[arm_name].seed, case_id, self.seed_names[arm_name], index)

    @contextlib.asynccontextmanager
    async def _first_of_twins(self, arm_name: str, client: ModelClient, args: dict[str, Any], index: int) -> Any:
        """Hold a twin arm's key (`twins`) while another key with the very same request
        (endpoint, model, body, sample index: the response cache's key) is in flight, so
        the request is sent once and the key after it replays the answer from the cache
        (or, when the first failed, makes its own attempt)."""
        if arm_name not in self.twins:
            yield
            return
        ident = (client.cache_endpoint, client.endpoint.model, request_hash(client.request_body(**args)), index)
        async with self.in_flight.hold(ident):
            yield

    def twin_share(self, key: Key) -> TwinShare | None:
        """How an agent sample of a twin arm shares its calls with its twin's
        (`TwinShare`: the sample name its calls are cached under is the seed name's, and
        each call waits while the same call of the twin is in flight); None for an arm
        with no twin. An arm run without the twin its seeds come from still caches under
        that name, so it replays the twin's calls of an earlier run."""
        case_id, arm_name, _ = key
        if arm_name not in self.twins and self.seed_names[arm_name] == arm_name:
            return None
        from evalkit.calls.session import TwinShare  # lazy: only an agent run's twins

        return TwinShare(sample=f"{case_id}/{self.seed_names[arm_name]}", hold=self.in_flight.hold)

    def _tick(self) -> None:
        limit = self.client.concurrency_limit
        throttled = f" concurrency={limit}/{self._concurrency}" if limit < self._concurrency else ""
        self.bar.set_postfix_str(
            f"errors={len(self.errored)} spend=${self.ledger.committed_usd:.4f}/${self.ledger.cap_usd:.4f}{throttled}"
            + (f" {self.remote.progress()}" if self.remote is not None else ""),
            refresh=False,
        )
        self.bar.update(1)

    def call_args(self, key: Key) -> dict[str, Any]:
        """The request arguments of a key (`ModelClient.complete` / `request_body`): its
        rendered prompt or messages, the config's parameters and its derived seed."""
        case_id, arm_name, index = key
        rendered = self.prompts[(case_id, arm_name)]
        kw: dict[str, Any] = (
            {"messages": rendered, "tools": self._tools} if isinstance(rendered, list) else {"prompt": rendered}
        )
        arm_config = self.arm_configs[arm_name]
        kw.update(temperature=arm_config.temperature, seed=self.seed_of(key), stop=self._stop)
        if arm_config.top_p is not None:
            kw["extra"] = {"top_p": arm_config.top_p}
        return kw

    async def one(self, key: Key) -> None:
        case_id, arm_name, index = key
        try:
            if self.conversations:  # a conversation suite: the simulated user meets the unit (evalkit.conversations)
                sample = await self._conversation(key)
            elif self.agents is not None:  # an agent unit: many calls, one sample (evalkit.running.agents)
                seed = self.seed_of(key)
                sample = await self.arm_agents.get(arm_name, self.agents).sample(
                    self.cases[case_id], self.arms[arm_name], index, seed, self.prompts.get((case_id, arm_name))
                )
            else:  # the prompt unit: one call (on Ray: sent from a node, made here: evalkit.running.executors)
                client, args = self.client_of(arm_name), self.call_args(key)
                complete = client.complete
                if self.remote_prompts is not None:
                    complete = functools.partial(self.remote_prompts.complete, client)
                async with self._first_of_twins(arm_name, client, args, index):
                    c = await complete(
                        **args,
                        sample_index=index,
                        key=f"{case_id}/{arm_name}/{index}",
                        should_stop=self.signal.should_stop,
                    )
                sample = self.sample_of(key, c)
        except BudgetExhausted as exc:
            self.stop("budget exhausted")
            attempts = int(getattr(exc, "attempts", 0))
            if attempts:  # refused on a retry: the key paid and errored
                self._error(key, f"{type(exc).__name__}: {exc}", attempts, getattr(exc, "cost_usd", None))
            return
        except CeilingBreached as exc:
            self.stop("ceiling breached")
            self._error(key, str(exc), getattr(exc, "attempts", 1), getattr(exc, "cost_usd", None))
            return
        except DiskFull as exc:  # the ledger could not record a reservation: nothing was sent
            self.stop(str(exc))
            return
        except CallStopped as exc:
            # The run stopped while this key waited to retry: no further attempt was
            # paid. A key that made earlier attempts says so; one that made none is
            # simply not run, like a key the dispatcher skipped.
            attempts = int(getattr(exc, "attempts", 0))
            if attempts:
                self._error(key, f"{type(exc).__name__}: {exc}", attempts, getattr(exc, "cost_usd", None))
            return
        except (InputTooLong, UnitCallError, ReplayMiss) as exc:
            self._error(
                key, f"{type(exc).__name__}: {exc}", getattr(exc, "attempts", 0), getattr(exc, "cost_usd", None)
            )
            self.should_stop()  # an unreachable endpoint stops the run now, not at the next key
            self._same_first_error(exc)
            if getattr(exc, "requeue", False) and key not in self.requeued and self.should_stop() is None:
                # its Ray node died mid-sample (evalkit.running.executors): errored (its calls stay paid), run once more
                self.requeued.add(key)
                del self.errored[key]
                await self.one(key)
            return
        except Exception as exc:  # noqa: BLE001 - a response nobody foresaw fails its sample, not the run
            self._error(key, f"unexpected {type(exc).__name__}: {exc}", getattr(exc, "attempts", 0))
            return
        self.append(key, sample)

    async def _conversation(self, key: Key) -> Sample:
        """A key's conversation (`ConversationRunner.sample`): the agent's seed as any
        sample's, the simulator's from (case, index), never the arm, so every arm meets
        the same user."""
        case_id, arm_name, index = key
        sim_seed = derive_seed(self.config.seed, case_id, SIMULATOR_SEED_NAME, index)
        return cast(
            Sample,
            await self.conversations[arm_name].sample(
                self.client_of(arm_name),
                self.cases[case_id],
                self.arms[arm_name],
                index,
                (self.seed_of(key), sim_seed),
                self.prompts.get((case_id, arm_name)) or [],
            ),
        )

    def _same_first_error(self, exc: Exception) -> None:
        """Stop the run when its first SAME_ERROR_STOP samples, none finished yet, all
        failed with the one error that is not retried (a 404 from an endpoint with no
        Responses API, a model that does not exist): every other sample would fail the
        same way, so none more is started."""
        message = str(exc)
        if self.done or not isinstance(exc, UnitCallError) or not message.endswith("(not retried)"):
            return
        self.first_causes.append(message.split(": ", 1)[-1])  # without the key's label
        if len(self.first_causes) == SAME_ERROR_STOP and len(set(self.first_causes)) == 1:  # said once
            self.stop(f"the first {len(self.first_causes)} samples failed with the same error: {self.first_causes[0]}")

    def sample_of(self, key: Key, c: Any) -> Sample:
        """A finished call of the prompt unit (a `client.Completion`) as the key's
        `results.jsonl` line."""
        case_id, arm_name, index = key
        return Sample(
            case_id=case_id,
            tags=self.cases[case_id].tags,
            arm=arm_name,
            index=index,
            seed=self.seed_of(key),
            model=c.model,
            output=c.text,
            tool_calls=c.tool_calls,
            finish_reason=c.finish_reason,
            usage=c.usage,
            latency_ms=round(c.latency_ms, 3),
            cost_usd=c.cost_usd,
            request_hash=c.request_hash,
            system_fingerprint=c.system_fingerprint,
            cached=c.cached,
            cost_avoided_usd=c.cost_avoided_usd,
        )

    def record(self, key: Key, c: Any) -> None:
        """Append a finished call (a `client.Completion`: a provider batch's line) as the
        key's sample."""
        self.append(key, self.sample_of(key, c))

    def append(self, key: Key, sample: Sample) -> None:
        """Append the key's finished sample to `results.jsonl`."""
        case_id, arm_name, _ = key
        try:
            self.folder.append_result(sample)
        except DiskFull as exc:  # paid and on the ledger; its answer is in the cache when that had room
            self.stop(str(exc))
            return
        self.done_per_arm[arm_name] += 1
        self.done_per_case[case_id] += 1
        if self.watcher is not None:
            self.watcher.add(key, sample)
        self._tick()

    def error(self, key: Key, message: str, attempts: int) -> None:
        """Record that a key failed (its `errors.jsonl` line)."""
        self._error(key, message, attempts)

    def _error(self, key: Key, message: str, attempts: int, cost_usd: float | None = None) -> None:
        self.errored[key] = message
        if self.watcher is not None:
            self.watcher.error(key)
        try:
            self.folder.append_error(key[0], key[1], key[2], message, attempts, cost_usd)
        except DiskFull as exc:
            self.stop(str(exc))
        self._tick()

    async def run(self, keys: Iterator[Key], concurrency: int) -> None:
        """Run `keys` with `concurrency` workers drawing from the one iterator: at most
        that many keys are in progress (and that many tasks exist), however many keys a
        run has. A worker stops drawing once the run stops."""

        async def worker() -> None:
            for key in keys:
                if self.should_stop() is not None:
                    return
                await self.one(key)

        workers = [asyncio.ensure_future(worker()) for _ in range(max(1, concurrency))]
        try:
            await asyncio.gather(*workers)
        finally:
            for t in workers:
                t.cancel()
            self.bar.close()


# Stop causes shown right after a ceiling breach: they say why nothing more could run.


def run_is_ci(config: Config) -> bool:
    """Whether `config` is a suite's config under its CI cap (`suite.ci_suite`, `evalkit
    run --ci`): lint holds `ci.cost_cap_usd` below `cost_cap_usd`, so the two cannot be
    told apart only when they are one number, which lint refuses."""
    return config.ci_cost_cap_usd is not None and config.cost_cap_usd == config.ci_cost_cap_usd


def arm_base_url(config: Config, arm: Arm, suite_url: str | None) -> str | None:
    """Where an arm's calls go: its own `generator.base_url` when it sets one other than
    the suite's, else the suite generator's resolved URL (`--base-url`, the environment,
    the config: `endpoints.resolve_base_url`)."""
    own = config.for_arm(arm).generator.base_url
    if "generator" in arm.overrides and own and own != config.generator.base_url:
        return own
    return suite_url


def arm_suite(suite: Suite, arm: Arm) -> Suite:
    """The suite as one arm runs it: its config is the arm's (`Config.for_arm`)."""
    arm_config = suite.config.for_arm(arm)
    return suite if arm_config is suite.config else dataclasses.replace(suite, config=arm_config)


def _client_identity(config: Config, url: str | None) -> tuple[Any, ...]:
    """What makes two arms' calls need two clients: model, endpoint, key, price, batch
    price, ceiling (two batch prices are two batches: each line is reserved at its own)."""
    g = config.generator
    return (g.model, url, g.api_key_env, config.price, config.batch_price, config.max_tokens_out)


def _plan(suite: Suite, arms: list[Arm], k: int) -> Iterator[Key]:
    """Every (case, arm, index) key of a run, in order, one at a time."""
    return ((c.id, a.name, i) for c in suite.cases for a in arms for i in range(k))


async def run_suite_async(suite: Suite | str | Path, options: RunOptions | None = None, **fields: Any) -> RunResult:
    """The async core of `run_suite`."""
    opts = _options(options, fields)
    if not isinstance(suite, Suite):
        from evalkit.suites.reader import load_suite

        suite = load_suite(suite)
    if opts.resume is not None:
        folder = RunFolder(opts.resume)  # its layout (sample files or not) comes from its config.json
        folder.read_meta()  # not a run folder: say so before creating anything in it
        with folder.lock(), runs_dir_lock(Path(opts.resume).parent):
            return await _run_in_folder(suite, folder, opts, runs_root=Path(opts.resume).parent)
    from evalkit.suites.suite import default_runs_dir  # a `runs` symlink out of the suite is refused

    runs_root = Path(opts.runs_dir) if opts.runs_dir is not None else default_runs_dir(suite.path)
    return await _run_in_folder(suite, None, opts, runs_root=runs_root)


def _options(options: RunOptions | None, fields: dict[str, Any]) -> RunOptions:
    """`options` (or the defaults) with `fields` (run_suite's keyword arguments) set:
    an unknown name is a TypeError, as for any keyword argument."""
    return dataclasses.replace(options or RunOptions(), **fields) if fields else options or RunOptions()


@dataclass(frozen=True)
class _RunPlan:
    """A run as `_plan_run` resolved and checked it, before anything is written: the
    suite (a resume's under the cap the run started under), the arms, each (case, arm)
    prompt rendered, where each arm's calls go (`arm_urls`) and whom its seeds derive
    from (`seeds`), the units' prepared targets (`agents.prepare`), and `opts` with the
    run's own arms, k, endpoint and watch. `meta` is a resumed run's `config.json`
    (empty for a new run: `_new_meta` builds its own from the plan)."""

    suite: Suite
    opts: RunOptions
    arm_objs: list[Arm]
    prompts: dict[tuple[str, str], Any]
    privacy: dict[str, Any]
    arm_urls: dict[str, str | None]
    seeds: dict[str, str]
    target: Any
    targets: dict[str, Any]
    snapshot: dict[str, Any]
    config_hash: str
    inputs: dict[str, str]
    inputs_hash: str
    ci: bool
    meta: dict[str, Any]
    stopping: str = "fixed"  # the run's stopping mode (`_stopping`: evalkit.running.until_decided)
    seq_plan: Plan | None = None  # a sequential run's pre-registered plan

    @property
    def k(self) -> int:
        """The run's k (resolved by `_plan_run`: the flag's, the config's or the resumed run's)."""
        assert self.opts.k is not None
        return self.opts.k


async def _run_in_folder(suite: Suite, folder: RunFolder | None, opts: RunOptions, *, runs_root: Path) -> RunResult:
    """Check the inputs (`_plan_run`), join the executor, then run (a new folder is
    created and locked only once every check passed; a resumed one, `folder`, is
    already locked by the caller)."""
    plan = _plan_run(suite, folder, opts)
    from evalkit.running.executors import open_executor  # a Ray cluster joined now (exit 2 if not), before any write

    remote = open_executor(
        opts.executor or plan.suite.config.executor,
        [arm_suite(plan.suite, a).config for a in plan.arm_objs],
        Path(suite.path) / "config.json",
        from_flag=opts.executor is not None,
    )
    meta = plan.meta if folder is not None else _new_meta(plan)
    try:
        if folder is None:
            with runs_dir_lock(runs_root):  # one run at a time per runs folder (and its response cache)
                folder = RunFolder.create(runs_root, meta)
                folder.write_case_table(CaseTable.from_cases(plan.suite.cases))  # the cases as this run sees them
                folder.sample_files = opts.sample_files
                with folder.lock():
                    result = await _execute(plan, folder, runs_root, remote)
                _no_folder_for_a_total_miss(result, opts)
                return result
        return await _execute(plan, folder, runs_root, remote)
    finally:
        if remote is not None:  # the Ray connection this run made (evalkit.running.executors)
            remote.close()


def replay_identity(generator: Endpoint) -> str | None:
    """Where a `--replay-only` run with no base URL looks for answers: the embedded
    model's identity from its file (`serve.LocalModelServer.cache_identity` at serve's
    defaults), so the answers `evalkit serve` gave replay with no server running; None
    for any other model (its answers are keyed by the URL that gave them)."""
    if generator.cache_identity or generator.model != LOCAL_MODEL_ALIAS:
        return generator.cache_identity
    try:
        return LocalModelServer(default_model_path()).cache_identity
    except EvalkitError:  # the `local` extra is not installed: nothing of it was cached
        return None


def _no_folder_for_a_total_miss(result: RunResult, opts: RunOptions) -> None:
    """A new `--replay-only` run that found no sample in the cache leaves no run folder
    (it would sit among the runs and in the reports as a failed run of no sample):
    `ReplayMiss` saying why, with the first miss."""
    if not opts.replay_only or result.samples_ran or result.samples_total == 0:
        return
    shutil.rmtree(result.path, ignore_errors=True)
    first = result.error_reasons[0] if result.error_reasons else "no cached response"
    raise ReplayMiss(
        f"--replay-only: none of the {result.samples_total} samples has a cached answer, so no run folder was "
        f"left ({first}); run once without --replay-only, or give the base URL of the server that answered"
    )


def _plan_run(suite: Suite, folder: RunFolder | None, opts: RunOptions) -> _RunPlan:
    """Resolve and check all a run needs, in the order the checks are reported, before
    anything is written: the batch flags, a resume against its run, the arms and k,
    every prompt rendered (bad input leaves no half-made run folder), the inputs
    unchanged since a resumed run started, the privacy gate, the endpoints and the
    units' programs. A resume that allows private data records that in its
    `config.json`."""
    _check_batch(suite, opts)
    snapshot = config_snapshot(suite.config)
    chash = config_hash(snapshot)
    ci = run_is_ci(suite.config)
    arms, k = opts.arms, opts.k
    meta: dict[str, Any] = {}
    if folder is not None:
        suite, arms, k, ci, meta = _resumed_run(suite, folder, arms, k, chash, ci)
    config = suite.config
    names, k = _arm_names(suite, arms, k)
    arm_objs = [config.arm(n) for n in names]
    prompts = _render_prompts(suite, arm_objs)
    inputs = input_hashes(suite, arm_objs)
    inputs_hash = config_hash(inputs)
    if folder is not None:
        _check_inputs_unchanged(folder, meta, inputs, inputs_hash)
    stopping, seq_plan = _stopping(suite, opts, names, meta)
    suite = _drawing_order(suite, stopping, seq_plan, meta)
    # personal data and secrets never reach an endpoint unless the user says so (evalkit.pii.privacy)
    from evalkit.pii.privacy import run_gate

    privacy = run_gate(
        suite, allowed=opts.allow_private_data, recorded=meta.get("privacy") if folder is not None else None
    )
    base_url = resolve_base_url(
        "generator",
        config.generator,
        opts.base_url,
        replay_only=opts.replay_only,
        config_path=Path(suite.path) / "config.json",
    )
    if folder is not None and privacy.get("allowed") and not (meta.get("privacy") or {}).get("allowed"):
        meta["privacy"] = privacy  # the flag given on this resume: the run's record says so
        write_atomic(folder.path / "config.json", json.dumps(meta, indent=2) + "\n")
    if folder is not None and meta.get("stopping", "fixed") != stopping:
        meta["stopping"] = stopping  # a resume that changed the run's mode (--[no-]until-decided) records it
        write_atomic(folder.path / "config.json", json.dumps(meta, indent=2) + "\n")
    arm_urls, seeds, watch = _wire_endpoints(config, arm_objs, base_url, opts, meta if folder is not None else None)
    sim_url = _simulator_url(suite, opts)
    from evalkit.running.agents import prepare  # a command's program, a python unit's function: found before any write

    target = prepare(suite)
    targets = {a.name: prepare(arm_suite(suite, a)) for a in arm_objs if "unit" in a.overrides}
    return _RunPlan(
        suite=suite,
        # the options as this run resolved them: its arms, k, endpoint and watch
        opts=dataclasses.replace(opts, arms=names, k=k, base_url=base_url, watch=watch, simulator_base_url=sim_url),
        arm_objs=arm_objs,
        prompts=prompts,
        privacy=privacy,
        arm_urls=arm_urls,
        seeds=seeds,
        target=target,
        targets=targets,
        snapshot=snapshot,
        config_hash=chash,
        inputs=inputs,
        inputs_hash=inputs_hash,
        ci=ci,
        meta=meta,
        stopping=stopping,
        seq_plan=seq_plan,
    )


def _stopping(suite: Suite, opts: RunOptions, names: list[str], meta: dict[str, Any]) -> tuple[str, Plan | None]:
    """The run's stopping mode (`until_decided`): `--until-decided` makes it sequential and
    `--no-until-decided` fixed (a resume that completes the fixed design, whatever the run's
    mode), else a resumed run's recorded mode (a plain resume carries on as it started),
    else the config's; a stopping run is checked gradable as it lands, a sequential one
    has its plan."""
    mode = str(meta.get("stopping") or suite.config.stopping) if meta else suite.config.stopping
    if opts.until_decided is not None:
        mode = "sequential" if opts.until_decided else "fixed"
    if mode == "fixed":
        return mode, None
    if opts.batch is not None:
        raise InputError(f"stopping {mode!r} decides as samples land; --batch sends them all at once: run online")
    until_decided.check_gradable(suite, names, mode)
    if mode != "sequential":
        return mode, None
    plan = until_decided.sequential_plan(suite)
    if not meta:  # a new run: one already started is resumed on the plan it started with
        until_decided.check_suite_size(suite, plan)
    return mode, plan


def _drawing_order(suite: Suite, mode: str, seq_plan: Plan | None, meta: dict[str, Any]) -> Suite:
    """The suite with its cases in the order the run draws them: a resumed run's recorded
    order, a new sequential run's seeded one (`until_decided.seeded_order`: the plan's
    seed, else the config's), else the suite's own."""
    by_id = {c.id: c for c in suite.cases}
    recorded = meta.get("cases")
    if isinstance(recorded, list) and len(recorded) == len(by_id) and set(recorded) == set(by_id):
        order = [str(c) for c in recorded]
    elif mode == "sequential" and seq_plan is not None:
        seed = seq_plan.seed if seq_plan.seed is not None else suite.config.seed
        order = until_decided.seeded_order(by_id, seed)
    else:
        return suite
    return dataclasses.replace(suite, cases=tuple(by_id[c] for c in order))


def _watcher(plan: _RunPlan, rows: list[dict[str, Any]], done_before: set[Key]) -> Any:
    """A stopping run's watch (`until_decided`), told first of the samples an earlier
    session ran (a resume carries on the same sequence); None for a fixed design."""
    names = list(plan.opts.arms or ())
    watcher: Any
    if plan.stopping == "sequential" and plan.seq_plan is not None:
        cases = [c.id for c in plan.suite.cases]
        watcher = until_decided.SequentialStop(plan.suite, plan.seq_plan, names, plan.k, cases)
    elif plan.stopping == "per_case":
        watcher = until_decided.PerCaseStop(plan.suite, plan.k)
    else:
        return None
    for r in rows:
        key = (r["case_id"], r["arm"], int(r["index"]))
        if key in done_before:
            watcher.add(key, r)
    return watcher


def _pending_keys(plan: _RunPlan, rows: list[dict[str, Any]], done_before: set[Key]) -> tuple[Iterator[Key], Any]:
    """The keys the run still has to draw, in its order, and its stopping watch (`_watcher`,
    None for a fixed design): a per-case run draws index-major (a case's next sample after
    its earlier ones had time to land), and a stopping run's watch gates the keys."""
    pending: Iterator[Key] = (key for key in _plan(plan.suite, plan.arm_objs, plan.k) if key not in done_before)
    watcher = _watcher(plan, rows, done_before)
    if isinstance(watcher, until_decided.PerCaseStop):
        pending = iter(watcher.order_keys(pending))
    return (pending if watcher is None else watcher.gate(pending)), watcher


def _check_batch(suite: Suite, opts: RunOptions) -> None:
    """Refuse `--batch` where it cannot run: with `--replay-only` (no calls), for a unit
    other than the prompt (an agent's calls each wait on the answer before), or for an
    arm without its batch price (`batch.check_ready`)."""
    if opts.batch is None:
        return
    config = suite.config
    if opts.replay_only:
        raise InputError("--replay-only makes no calls, so it takes no --batch")
    if config.unit.kind != "prompt" or config.simulator is not None:  # a conversation's turns wait on each other
        what = "conversation's" if config.simulator is not None else f"{config.unit.kind} unit's"
        raise InputError(
            f"--batch sends independent calls; a {what} calls each depend on the answer before (run it online)",
            Path(suite.path) / "config.json",
            json_path="$.unit.kind",
        )
    from evalkit.running import (
        batch as batches,  # lazy: evalkit.running.batch only for a run that sends or left batches
    )

    # each arm's own batch price (an unknown arm name is refused later, with the others)
    for i, a in enumerate(config.arms):
        if not opts.arms or a.name in opts.arms:
            batches.check_ready(config.for_arm(a), config_path=Path(suite.path) / "config.json", arm=(i, a))


def _resumed_run(
    suite: Suite, folder: RunFolder, arms: list[str] | None, k: int | None, chash: str, ci: bool
) -> tuple[Suite, list[str], int, bool, dict[str, Any]]:
    """What a resume of `folder` runs: the run's own arms, k and cap and whether it is a
    CI run (from its `config.json`, returned as `meta`), once the suite's config, the
    `arms` and `k` asked for and the cases are checked to match the run. Keeps the run's
    layout (`folder.sample_files`)."""
    meta = folder.read_meta()
    if meta.get("config_hash") != chash:
        raise InputError(
            "the suite's config.json changed since this run started; start a new run instead of resuming",
            folder.path / "config.json",
            json_path="$.config_hash",
        )
    run_arms, run_k = list(meta["arms"]), int(meta["k"])
    if arms is not None and list(arms) != run_arms:
        raise InputError(f"--arms {','.join(arms)} differs from the run's arms {','.join(run_arms)}")
    if k is not None and int(k) != run_k:
        raise InputError(f"--k {k} differs from the run's k {run_k}")
    present = {x.id for x in suite.cases}
    missing = [c for c in meta.get("cases", []) if c not in present]
    if missing:
        raise InputError(
            f"cases of the run are no longer in the suite: {', '.join(missing[:5])}",
            Path(suite.path) / "cases.jsonl",
        )
    folder.sample_files = bool(meta.get("sample_files", True))  # keep the run's layout whole
    recorded_cap = meta.get("cost_cap_usd")
    if isinstance(recorded_cap, (int, float)) and not isinstance(recorded_cap, bool):
        if ci and not meta.get("ci"):
            raise InputError(
                f"--ci: this run was not a CI run (it runs under cost_cap_usd ${recorded_cap:g}); resume it "
                "without --ci, or start a new run with --ci",
                folder.path / "config.json",
                json_path="$.ci",
            )
        # the cap the run started under, whatever this resume was given (a CI run stays
        # under ci.cost_cap_usd without --ci): the whole run spends under one cap
        config = dataclasses.replace(suite.config, cost_cap_usd=float(recorded_cap))
        suite = dataclasses.replace(suite, config=config)
        ci = bool(meta.get("ci"))
    return suite, run_arms, run_k, ci, meta


def _arm_names(suite: Suite, arms: list[str] | None, k: int | None) -> tuple[list[str], int]:
    """The arms a run runs (`arms`, else every arm of the config) and its k (`k`, else
    the config's), refused when an arm is unknown or named twice, or when the run is
    larger than lint allows the config's (`suite.run_size_problem`)."""
    config = suite.config
    names = list(arms) if arms is not None else [a.name for a in config.arms]
    if not names:
        raise InputError("no arms to run", Path(suite.path) / "config.json", json_path="$.arms")
    known = {a.name for a in config.arms}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(
            f"unknown arm(s) {', '.join(unknown)}; the config has {', '.join(sorted(known))}",
            Path(suite.path) / "config.json",
            json_path="$.arms",
        )
    if len(set(names)) != len(names):
        raise InputError(f"arm named twice in {','.join(names)}")
    k = int(k if k is not None else config.k)
    from evalkit.suites.suite import run_size_problem  # the limits lint holds the config's k to, on --k and --arms too

    problem = run_size_problem(len(suite.cases), len(names), k)
    if problem:
        raise InputError(problem)
    return names, k


def _render_prompts(suite: Suite, arm_objs: list[Arm]) -> dict[tuple[str, str], Any]:
    """Each (case id, arm name)'s prompt (a text, or a list of messages) as the arm
    renders it (`suite.render_prompt`); none for a command or python unit, which gets
    the case as JSON."""
    from evalkit.suites.suite import render_prompt

    config = suite.config
    if config.unit.kind not in ("prompt", "agent"):
        return {}
    return {(c.id, a.name): render_prompt(config.for_arm(a), c, a) for c in suite.cases for a in arm_objs}


def _check_inputs_unchanged(folder: RunFolder, meta: dict[str, Any], inputs: dict[str, str], inputs_hash: str) -> None:
    """Refuse to resume a run whose inputs (`input_hashes`: templates, guidance, skills,
    cases, program) changed since it started, naming each that did."""
    before = meta.get("inputs")
    if isinstance(before, dict) and meta.get("inputs_hash") != inputs_hash:
        changed = _changed_inputs(before, inputs)
        raise InputError(
            f"changed since this run started: {'; '.join(changed)}; start a new run instead of resuming",
            folder.path / "config.json",
            json_path="$.inputs",
        )


def _simulator_url(suite: Suite, opts: RunOptions) -> str | None:
    """Where a conversation suite's simulator calls go (`--simulator-base-url`,
    EVALKIT_SIMULATOR_BASE_URL, `simulator.base_url`; never a default host), its key
    checked; None for a suite without a simulator."""
    sim = suite.config.simulator
    if sim is None:
        return None
    if (opts.executor or suite.config.executor).kind == "ray":
        raise InputError("a conversation suite runs its conversations on this machine: no Ray executor (yet)")
    url = resolve_base_url(
        "simulator",
        sim.endpoint,
        opts.simulator_base_url,
        replay_only=opts.replay_only,
        config_path=Path(suite.path) / "config.json",
    )
    check_endpoint(sim.endpoint, url, opts.replay_only)
    return url


def _wire_endpoints(
    config: Config, arm_objs: list[Arm], base_url: str | None, opts: RunOptions, recorded: dict[str, Any] | None
) -> tuple[dict[str, str | None], dict[str, str], Watch | None]:
    """Where each arm's calls go (an arm with its own `generator.base_url` sends there,
    every other one where the suite's generator does; each endpoint and its key checked
    now), each arm's seed name, and the run's watch (the caller's, joined by that of
    each `evalkit serve` server the run calls). A resumed run (`recorded`: its
    `config.json`) keeps the seed names it recorded; one from before arms could share
    seeds derives every arm's from its own name, as it always did."""
    check_endpoint(config.generator, base_url, opts.replay_only)
    watch = combine(opts.watch, served_watch(base_url))
    arm_urls = {a.name: arm_base_url(config, a, base_url) for a in arm_objs}
    if recorded is not None:
        recorded_seeds = recorded.get("seed_names")
        seeds = {str(a): str(b) for a, b in recorded_seeds.items()} if isinstance(recorded_seeds, dict) else {}
    else:
        every_url = {a.name: arm_base_url(config, a, base_url) for a in config.arms}
        names = {a.name for a in arm_objs}
        seeds = {n: s for n, s in seed_names(config, every_url).items() if n in names}
    for a in arm_objs:
        check_endpoint(config.for_arm(a).generator, arm_urls[a.name], opts.replay_only)
        if arm_urls[a.name] != base_url:
            watch = combine(watch, served_watch(arm_urls[a.name]))
    return arm_urls, seeds, watch


def _new_meta(plan: _RunPlan) -> dict[str, Any]:
    """A new run's `config.json`: the suite, its config and input hashes, the arms, k and
    cases planned, the layout, privacy record, cap and isolation, and each arm's
    settings and seed name, as resumes and reports read them."""
    suite, config = plan.suite, plan.suite.config
    return {
        "suite": str(suite.path),
        "suite_name": suite.name,
        "config": plan.snapshot,
        "config_hash": plan.config_hash,
        "inputs": plan.inputs,
        "inputs_hash": plan.inputs_hash,
        "arms": [a.name for a in plan.arm_objs],
        "k": plan.k,
        "cases": [c.id for c in suite.cases],
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": "evalkit",
        "sample_files": plan.opts.sample_files,
        # answers from the response cache only: kept out of the suite's trend and a notebook's default run
        "replay_only": plan.opts.replay_only,
        "privacy": plan.privacy,
        "cost_cap_usd": config.cost_cap_usd,  # the cap this run (and its grading) spends under
        "isolation": config.unit.isolation if config.unit.kind in ("command", "python") else None,
        "ci": plan.ci,
        # each arm's model, endpoint host and parameters, as the reports name them
        "arm_settings": {
            a.name: config.arm_settings(a, plan.arm_urls[a.name])
            | (scripted_answers(config.for_arm(a).generator, plan.arm_urls[a.name]) or {})
            for a in plan.arm_objs
        },
        "seed_names": plan.seeds,  # the name each arm's seeds derive from (`seed_names`)
        "stopping": plan.stopping,  # when the run may stop before the fixed design's end (until_decided)
        **_simulator_meta(config),
    }


def _simulator_meta(config: Config) -> dict[str, Any]:
    """What a run records of its simulated user, as of its judge: the model and the
    prompt file it played the user by, with the file's sha256."""
    sim = config.simulator
    if sim is None:
        return {}
    sha = hashlib.sha256(sim.prompt.encode("utf-8")).hexdigest()
    return {"simulator": {"model": sim.endpoint.model, "prompt_file": sim.prompt_file, "prompt_sha256": sha}}


async def _execute(plan: _RunPlan, folder: RunFolder, runs_root: Path, remote: Any) -> RunResult:
    """Run the keys of the plan (cases x arms x k) that `folder` lacks, under its lock
    and the runs folder's, then settle and record the run (`_summarise`, `_record_run`).
    Each resource is closed however the run ends, even when building the next one or
    closing another fails (the cache flushes its last rows, the sample writer drains)."""
    suite, opts, k = plan.suite, plan.opts, plan.k
    rows = folder.results()
    done_before = _done_keys(rows, suite, plan.arm_objs, k)
    samples_total = len(suite.cases) * len(plan.arm_objs) * k
    pending, watcher = _pending_keys(plan, rows, done_before)
    interrupted: BaseException | None = None
    async with contextlib.AsyncExitStack() as stack:
        stack.callback(folder.close)
        start_cause = _ready_folder(folder, rows)
        del rows
        ledger = Ledger.resume(suite.config.cost_cap_usd, folder.ledger_path)
        stack.callback(ledger.close)
        rcache = ResponseCache(runs_root / CACHE_FILE) if (opts.cache or opts.replay_only) else None
        if rcache is not None:
            stack.callback(rcache.close)
        client, clients = await _open_clients(stack, plan, ledger, rcache)
        engine = _Engine(
            suite,
            plan.arm_objs,
            folder,
            ledger,
            client,
            rcache,
            samples_total - len(done_before),
            opts.progress,
            plan.prompts,
            opts.watch,
            clients=clients,
            seeds=plan.seeds,
        )
        engine.remote = remote
        engine.watcher = watcher
        if start_cause is not None:
            engine.stop(start_cause)
        await _start_units(stack, engine, plan, remote)
        try:
            await _run_pending(engine, pending, plan)
        except (asyncio.CancelledError, KeyboardInterrupt) as exc:
            # Ctrl-C: the calls in flight were settled at their worst case by the client;
            # write the INCOMPLETE summary, then let the interruption go on.
            interrupted = exc
            engine.stop("interrupted")
    engine.should_stop()  # what closing found (the cache's last flush) counts too
    summary, reasons = _summarise(plan, engine, ledger, done_before)
    result = _record_run(plan, folder, engine, summary, reasons)
    if interrupted is not None:
        raise interrupted
    return result


def _done_keys(rows: list[dict[str, Any]], suite: Suite, arm_objs: list[Arm], k: int) -> set[Key]:
    """The keys of the plan (cases x arms x k) that `rows` (`results.jsonl`) already
    hold; a row outside the plan (a case, arm or index no longer run) is not one."""
    cases, arms = {c.id for c in suite.cases}, {a.name for a in arm_objs}
    return {
        key
        for key in ((r["case_id"], r["arm"], int(r["index"])) for r in rows)
        if key[0] in cases and key[1] in arms and 0 <= key[2] < k
    }


def _ready_folder(folder: RunFolder, rows: list[dict[str, Any]]) -> str | None:
    """Reserve the space the summary needs (freed if the disk fills) and write the
    sample files a kill left missing; returns the stop cause when the disk is full."""
    try:
        folder.reserve_space()
        if rows and folder.sample_files:
            folder.repair_sample_files(rows)  # a kill (or a full disk) can leave samples without their file
    except DiskFull as exc:
        return str(exc)
    return None


async def _open_clients(
    stack: contextlib.AsyncExitStack, plan: _RunPlan, ledger: Ledger, rcache: ResponseCache | None
) -> tuple[ModelClient, dict[str, ModelClient]]:
    """The suite generator's client and each arm's: one client per distinct (model,
    endpoint, price, output ceiling) of the arms (`_client_identity`), so each
    reservation is at its arm's own worst case and each request carries its arm's
    model; all on the one ledger and response cache, each closed by `stack`."""
    config, base_url = plan.suite.config, plan.opts.base_url

    def make_client(arm_config: Config, url: str | None) -> ModelClient:
        return ModelClient.of_run(
            config,
            "generator",
            arm_config.generator,
            arm_config.price,
            ledger,
            max_tokens_out=arm_config.max_tokens_out,
            cache=rcache,
            replay_only=plan.opts.replay_only,
            url=url,
            # a --replay-only run with no server: the embedded model's answers found by its file
            replay_key=None if url else replay_identity(arm_config.generator),
        )

    client = make_client(config, base_url)
    stack.push_async_callback(client.aclose)
    clients: dict[str, ModelClient] = {}
    shared: dict[tuple[Any, ...], ModelClient] = {_client_identity(config, base_url): client}
    for arm in plan.arm_objs:
        arm_config = config.for_arm(arm)
        url = plan.arm_urls.get(arm.name, base_url)
        ident = _client_identity(arm_config, url)
        if ident not in shared:
            shared[ident] = make_client(arm_config, url)
            stack.push_async_callback(shared[ident].aclose)
        clients[arm.name] = shared[ident]
    return client, clients


async def _start_units(stack: contextlib.AsyncExitStack, engine: _Engine, plan: _RunPlan, remote: Any) -> None:
    """Start what runs the samples besides the engine's own calls: a prompt unit's Ray
    tasks (`executors.RemotePrompts`), or each arm's `agents.AgentRunner` (its unit, its
    model's client: the tool loop, or a program behind the proxy), each closed by
    `stack`."""
    config = plan.suite.config
    if config.simulator is not None:  # a conversation suite: each turn answered here (evalkit.conversations)
        await _start_conversations(stack, engine, plan)
        return
    if config.unit.kind == "prompt" and remote is not None:  # one Ray task per sample, its call made here
        from evalkit.running.executors import RemotePrompts

        engine.remote_prompts = await RemotePrompts(remote, config.generator.model, config.unit.resources).start()
        stack.push_async_callback(engine.remote_prompts.aclose)
    if config.unit.kind == "prompt":
        return
    for arm in plan.arm_objs:
        engine.arm_agents[arm.name] = runner = await _agent_runner(stack, engine, plan, arm, remote)
        engine.agents = engine.agents or runner


async def _agent_runner(
    stack: contextlib.AsyncExitStack, engine: _Engine, plan: _RunPlan, arm: Arm, remote: Any = None
) -> Any:
    """The arm's started `agents.AgentRunner` (its unit, its model's client, its program
    or worker argv, `remote` its Ray executor), closed by `stack`."""
    from evalkit.running.agents import AgentRunner

    runner = await AgentRunner(
        arm_suite(plan.suite, arm),
        engine.folder.path,
        engine.clients[arm.name],
        should_stop=engine.signal.should_stop,
        on_stop=engine.stop,
        target=plan.targets.get(arm.name, plan.target),
        executor=remote,
        share=engine.twin_share,
    ).start()
    stack.push_async_callback(runner.aclose)
    return runner


async def _start_conversations(stack: contextlib.AsyncExitStack, engine: _Engine, plan: _RunPlan) -> None:
    """Each arm's `ConversationRunner`, all meeting one simulated user: its client (role
    `simulator` on the run's ledger and response cache, closed by `stack`, asked by the
    run's stop signal) and the run's in-flight registry (two arms' identical simulator
    calls go out once); a command unit's turns run by the arm's `agents.AgentRunner`
    (its program behind the proxy, in its sandbox)."""
    from evalkit.conversations.loop import ConversationRunner
    from evalkit.conversations.simulator import SimulatedUser, simulator_client

    config, opts = plan.suite.config, plan.opts
    client = simulator_client(config, engine.ledger, engine.rcache, opts.simulator_base_url, opts.replay_only)
    stack.push_async_callback(client.aclose)
    engine.signal.clients = {**engine.clients, SIMULATOR_SEED_NAME: client}
    assert config.simulator is not None
    user = SimulatedUser(config.simulator, client, engine.in_flight.hold if engine.rcache is not None else None)
    for arm in plan.arm_objs:
        command = config.for_arm(arm).unit.kind == "command"
        program = await _agent_runner(stack, engine, plan, arm) if command else None
        engine.conversations[arm.name] = ConversationRunner(
            config.for_arm(arm),
            engine.folder.path,
            user,
            should_stop=engine.signal.should_stop,
            on_stop=engine.stop,
            share=engine.twin_share,
            program=program,
        )


async def _run_pending(engine: _Engine, pending: Iterator[Key], plan: _RunPlan) -> None:
    """Run the `pending` keys: first through the provider's Batch API when the run asks
    for it or an earlier session left batches open (`batch.run_keys`), then online, by
    the config's `concurrency` workers."""
    opts, folder = plan.opts, engine.folder
    if opts.batch is not None or (folder.path / BATCHES).exists():  # a provider batch (evalkit.running.batch)
        from evalkit.running import (
            batch as batches,  # lazy: evalkit.running.batch only for a run that sends or left batches
        )

        if opts.batch is not None or batches.has_open(folder.path):
            pending = await batches.run_keys(engine, pending, plan.k, opts.batch, opts.base_url)
    await engine.run(pending, plan.suite.config.concurrency)


TAIL_LINES = 8  # the last lines of an errored sample's stderr shown under INCOMPLETE


def stderr_tails(
    run_path: Path, lines: list[dict[str, Any]], without: set[Key], limit: int = MAX_ERROR_REASONS
) -> list[dict[str, str]]:
    """The last `TAIL_LINES` lines of the stderr of the first `limit` errored samples
    (not in `without`) whose program left one (their trajectories' ``end`` line, as
    written: redacted), so a failing program's traceback is on the terminal."""
    from evalkit.runfolder.trajectories import read_trajectory  # an errored agent run only

    out: list[dict[str, str]] = []
    for e in lines:
        key = (str(e.get("case_id")), str(e.get("arm")), int(e.get("index", -1)))
        if key in without or any(t["sample"] == "/".join(map(str, key)) for t in out):
            continue
        traj = read_trajectory(run_path, *key)
        tail = str((traj.end or {}).get("stderr_tail") or "") if traj is not None else ""
        if tail.strip():
            out.append({"sample": "/".join(map(str, key)), "tail": "\n".join(tail.strip().splitlines()[-TAIL_LINES:])})
        if len(out) == limit:
            break
    return out


def _arm_counts(
    plan: _RunPlan, engine: _Engine, done_before: set[Key]
) -> tuple[dict[str, dict[str, Any]], collections.Counter[str], tuple[str, ...]]:
    """Each arm's samples, errors and missing keys (as `metrics.missing_and_errored`
    defines them for every page), each case's finished samples, and the first distinct
    reasons samples without a result errored (`error_reasons`)."""
    folder, k = engine.folder, plan.k
    per_arm: dict[str, dict[str, Any]] = {a.name: {"samples": 0, "errors": 0} for a in plan.arm_objs}
    by_case: collections.Counter[str] = collections.Counter(engine.done_per_case)
    for c, a, _ in done_before:
        per_arm[a]["samples"] += 1
        by_case[c] += 1
    for a, n in engine.done_per_arm.items():
        per_arm[a]["samples"] += n
    run_errors = folder.errors()
    errored_keys = {(str(e["case_id"]), str(e["arm"]), int(e["index"])) for e in run_errors} | set(engine.errored)
    finished = folder.finished_keys() if errored_keys else set(done_before)  # read only when some sample errored
    watcher = engine.watcher  # a stopping run expects only the keys its design still needs
    for arm in plan.arm_objs:
        expected = [key for key in _plan(plan.suite, [arm], k) if watcher is None or watcher.needed(key)]
        if errored_keys:
            missing, errored = metrics.missing_and_errored(expected, finished, errored_keys)
        else:
            missing, errored = len(expected) - per_arm[arm.name]["samples"], 0
        per_arm[arm.name].update(errors=errored, missing=missing)
    n_errored = sum(c["errors"] for c in per_arm.values())
    reasons = error_reasons(run_errors, finished) if n_errored else ()
    if n_errored and plan.suite.config.unit.kind in ("command", "python"):
        engine.stderr_tails = stderr_tails(folder.path, run_errors, finished)
    return per_arm, by_case, reasons


def _arm_money(plan: _RunPlan, ledger_path: Path, per_arm: dict[str, dict[str, Any]]) -> None:
    """Add each arm's own money to `per_arm`: what its calls paid and what the cache
    saved it (the ledger's `spend_by_arm`), what was paid this time per case (not
    `cost_per_case_usd`: list price, from the grades) and its model."""
    spend = spend_by_arm(ledger_path)
    for arm in plan.arm_objs:
        row = spend.get(arm.name, {})
        per_arm[arm.name]["paid_usd"] = row.get("paid_usd", 0.0)
        per_arm[arm.name]["avoided_usd"] = row.get("avoided_usd", 0.0)
        per_arm[arm.name]["paid_per_case_usd"] = row.get("paid_usd", 0.0) / max(1, len(plan.suite.cases))
        generator = plan.suite.config.for_arm(arm).generator
        scripted = scripted_answers(generator, plan.arm_urls[arm.name])
        per_arm[arm.name]["model"] = "scripted" if scripted else generator.model
        per_arm[arm.name].update(scripted or {})


def _summarise(
    plan: _RunPlan, engine: _Engine, ledger: Ledger, done_before: set[Key]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The run's `summary.json` (complete or INCOMPLETE and why, cases and samples run,
    spend, breaches, each arm's counts and money) and the reasons samples errored. A
    ceiling breached in an earlier session stops the run too: never hidden on a resume."""
    suite, k = plan.suite, plan.k
    per_arm, by_case, reasons = _arm_counts(plan, engine, done_before)
    _arm_money(plan, engine.folder.ledger_path, per_arm)
    n_errored = sum(c["errors"] for c in per_arm.values())
    n_missing = sum(c["missing"] for c in per_arm.values())
    samples_total = len(suite.cases) * len(plan.arm_objs) * k
    samples_ran = len(done_before) + engine.done
    # a stopping run is complete when its design is: every key it still needs ran, none errored
    settled = engine.watcher is not None and not engine.watcher.errored and not (n_missing or n_errored)
    complete = samples_ran == samples_total or (settled and engine.stop_reason is None)
    if ledger.breaches and "ceiling breached" not in engine.stop_causes:
        engine.stop("ceiling breached in an earlier session")
    reason = engine.stop_reason
    # A provider batch still running holds its reservation: spent until collected, as a
    # resume counts it (below the ledger's tolerance: the rounding of settled calls).
    in_flight = ledger.reserved_usd if ledger.reserved_usd > 1e-12 else 0.0
    if not complete and reason is None:
        reason = f"{n_errored} sample(s) errored" if n_errored else "samples missing"
        if n_errored and n_missing:
            reason += f", {n_missing} missing"
    summary: dict[str, Any] = {
        "complete": complete,
        "ran": sum(1 for c in suite.cases if by_case.get(c.id, 0) == len(plan.arm_objs) * k),
        "total": len(suite.cases),
        "samples_ran": samples_ran,
        "samples_total": samples_total,
        "reason": None if complete else reason,
        "spend_usd": ledger.committed_usd + in_flight,
        "avoided_usd": ledger.avoided_usd,
        "cap_usd": ledger.cap_usd,
        "ceiling_breaches": ledger.breaches,
        "untrusted_usage": ledger.untrusted,
        "samples_errored": n_errored,
        "samples_missing": n_missing,
        "per_arm": per_arm,
        "exit_code": 0 if complete else 1,
    }
    if reasons:
        summary["error_reasons"] = list(reasons)
    if in_flight:
        summary["in_flight_usd"] = in_flight
    if suite.config.simulator is not None:  # a conversation suite's third paid role (evalkit.conversations)
        summary["simulator_spend_usd"] = role_spend(engine.folder.ledger_path, "simulator")
    if suite.config.unit.kind in ("command", "python"):  # evalkit.calls.sandbox: whether the program was contained
        summary["isolation"] = suite.config.unit.isolation
    if engine.stop_detail:
        summary["stop_detail"] = engine.stop_detail
    if engine.watcher is not None:
        _record_stop(plan, engine, summary)
    if engine.stderr_tails:
        summary["stderr_tails"] = engine.stderr_tails
    return summary, reasons


def _record_stop(plan: _RunPlan, engine: _Engine, summary: dict[str, Any]) -> None:
    """Add a stopping run's `stopping` block to its summary (`until_decided.StopRecord`:
    what the stop saved against the fixed design); an INCOMPLETE sequential run's reason
    says why its test could not go on."""
    record = engine.watcher.record(summary["samples_ran"], summary["spend_usd"], summary["per_arm"])
    summary["stopping"] = record.to_json()
    if record.mode == "sequential" and engine.watcher.errored and not summary["complete"]:
        summary["reason"] = f"{summary['reason']}; {record.reason}"


def _record_run(
    plan: _RunPlan, folder: RunFolder, engine: _Engine, summary: dict[str, Any], reasons: tuple[str, ...]
) -> RunResult:
    """Write `summary.json` and `summary.md` into the reserve freed for them (a full disk
    is said on stderr: the folder stays resumable), say on stderr what a reader must
    know (an uncontained program, the INCOMPLETE line, why samples errored, a watch's
    detail), and return the run's `RunResult`."""
    folder.release_space()
    try:
        folder.write_summary(summary, _format_summary_md(plan.suite, summary))
    except DiskFull as exc:  # even the freed reserve was taken: say so, the run folder stays resumable
        print(f"evalkit: summary not written ({printable(str(exc))})", file=sys.stderr, flush=True)
    result = RunResult(
        path=folder.path,
        complete=bool(summary["complete"]),
        ran=int(summary["ran"]),
        total=int(summary["total"]),
        samples_ran=int(summary["samples_ran"]),
        samples_total=int(summary["samples_total"]),
        reason=cast("str | None", summary["reason"]),
        spend_usd=cast(float, summary["spend_usd"]),
        avoided_usd=cast(float, summary["avoided_usd"]),
        cap_usd=cast(float, summary["cap_usd"]),
        per_arm=summary["per_arm"],
        exit_code=cast(int, summary["exit_code"]),
        privacy=dict(plan.privacy or {}),
        stop_detail=engine.stop_detail,
        error_reasons=reasons,
        stopping=summary.get("stopping"),
    )
    if summary.get("isolation") == "none":
        print(f"evalkit: {NOT_CONTAINED}", file=sys.stderr, flush=True)
    if not result.complete:
        print(printable(result.incomplete_line or ""), file=sys.stderr, flush=True)
        for why in result.error_reasons:  # why samples errored, not only how many
            print(printable(f"  error: {why}"), file=sys.stderr, flush=True)
        for line in (result.stop_detail or "").splitlines():  # each line made printable, not the block
            print(printable(line), file=sys.stderr, flush=True)
        for t in summary.get("stderr_tails") or ():  # why a program failed: its traceback's last lines
            print(printable(f"  stderr of {t['sample']}:"), file=sys.stderr, flush=True)
            for line in t["tail"].splitlines():
                print("    " + printable(line), file=sys.stderr, flush=True)
    return result


def run_suite(suite: Suite | str | Path, options: RunOptions | None = None, **fields: Any) -> RunResult:
    """Run cases x arms x k samples of a suite (a `Suite` or its folder) and write a run
    folder; see the module docstring. How is one `RunOptions` (`options`), or its fields
    as keyword arguments (`run_suite(suite, k=3, base_url=...)`), or both (the keywords
    replace the options' fields): `base_url` overrides `EVALKIT_BASE_URL` and the
    config's generator URL (with none of them the run is refused: `endpoints`); `watch`
    (e.g. `LocalModelServer.exit_reason`) is asked before every sample and attempt, and
    a reason from it stops the run at once, INCOMPLETE (`endpoints` says more); `batch`
    (`evalkit.running.batch.BatchOptions`) sends the missing keys through the provider's Batch
    API. Raises `InputError` on bad input before anything is written, personal data or
    secrets in the suite included (`evalkit.pii.privacy.run_gate`) unless
    `allow_private_data`."""
    opts = _options(options, fields)
    with _frozen_heap():
        return asyncio.run(run_suite_async(suite, opts))


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """Keep the objects that exist before a run (imported modules: pandas alone brings
    over 100,000) out of the garbage collector's scans during it: a run allocates a few
    objects per call, each oldest-generation collection walked the whole heap, and that
    was about a tenth of a fast run's CPU. The objects are handed back afterwards. Left
    alone when the caller already froze objects of its own."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()

"""``agentflow runs``: start, list, show, cancel, retry, rerun, resume and migrate runs."""

from __future__ import annotations

import typer

from agentflow.cli.common import console, err_console, parse_json_option, run_with_engine
from agentflow.cli.render import runs_table, short, status_text, timeline
from agentflow.cli.run_ref import resolve_run_id
from agentflow.core.errors import ConfigError
from agentflow.core.run_filters import parse_run_filter
from agentflow.engine import Engine

app = typer.Typer(help="Start and inspect runs.", no_args_is_help=True)


@app.command("start")
def start(
    workflow: str = typer.Argument(..., help="Workflow name or id."),
    payload: str | None = typer.Option(None, "--payload", "-p", help="The run's input, as JSON."),
    state: str | None = typer.Option(
        None, "--state", help="Starting values of the run's variables, as a JSON object."
    ),
    version: int | None = typer.Option(None, help="Pin a version (default: the latest)."),
    from_node: str | None = typer.Option(
        None, "--from-node", help="Start at this node instead of the first."
    ),
    inputs: str | None = typer.Option(None, "--inputs", help="With --from-node: that node's input, as JSON."),
    idempotency_key: str | None = typer.Option(
        None,
        "--idempotency-key",
        help="Start at most one run for this key (the same command again shows it).",
    ),
    wait: bool = typer.Option(
        False, "--wait", help="Wait for the run to end (needs a worker); exit 1 unless it completed."
    ),
    timeout: float = typer.Option(
        3600.0, "--timeout", min=0, help="With --wait: give up after this many seconds."
    ),
) -> None:
    """Start a run."""
    data = parse_json_option(payload, "--payload")
    variables = parse_json_option(state, "--state")
    given = parse_json_option(inputs, "--inputs")

    async def go(engine: Engine) -> bool:
        started = await engine.start_run_once(
            workflow, data, state=variables, version=version, start_from=from_node, inputs=given,
            idempotency_key=idempotency_key,
        )  # fmt: skip
        run = started.run
        verb = (
            "run [bold]{}[/] was started earlier with this key"
            if started.replayed
            else "started run [bold]{}[/]"
        )
        console.print(verb.format(run.id) + f" (version {run.workflow_version})")
        if not wait:
            return True
        run = await engine.wait_for_run(run.id, timeout=timeout)
        console.print(timeline(run, await engine.list_steps(run.id)))
        if not run.status.is_terminal:
            err_console.print(
                f"[bold red]error[/] run {run.id} did not end within {timeout:g} s (it is {run.status})",
                highlight=False,
            )
            return False
        if run.status != "completed":
            # Scripts chain on the exit code: only a completed run is a success.
            why = f": {run.error.get('code')}: {run.error.get('message')}" if run.error else ""
            err_console.print(f"run {run.id} {run.status}{why}", highlight=False, soft_wrap=True)
            return False
        return True

    if not run_with_engine(go):
        raise typer.Exit(1)


@app.command("list")
def list_(
    workflow: str | None = typer.Option(None, "--workflow", "-w", help="Only this workflow."),
    status: str | None = typer.Option(None, "--status", "-s", help="Only this status."),
    model: str | None = typer.Option(
        None, "--model", help="Only runs that called this model (provider:model)."
    ),
    employee: str | None = typer.Option(None, "--employee", help="Only runs of this AI employee."),
    account: str | None = typer.Option(None, "--account", help="Only runs about this account."),
    where: list[str] = typer.Option(
        [],
        "--where",
        help="Any run-search filter as name=value, repeatable: state[plan]=gold, usd[gt]=0.5,"
        " started[gte]=2026-11-01T00:00Z, trigger=event, enrollment_key=... (as GET /api/runs takes them).",
    ),
    limit: int = typer.Option(50, min=1, max=500),
    loop_of: str | None = typer.Option(
        None, "--loop-of", help="The loop items of this run (they are not listed otherwise)."
    ),
) -> None:
    """List runs, newest first (loop items only with --loop-of); every filter must hold."""
    params: list[tuple[str, str]] = [("limit", str(limit))]
    for name, value in (
        ("status", status),
        ("model", model),
        ("employee", employee),
        ("account_id", account),
    ):
        if value is not None:
            params.append((name, value))
    for item in where:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            console.print(
                f"[bold red]error[/] query_parameter_invalid: --where {item[:80]!r} is not name=value"
            )
            raise typer.Exit(2)
        params.append((name.strip(), value))
    try:  # refused before any connection: a misspelt filter never lists every run
        parse_run_filter(params)
    except ConfigError as exc:
        console.print(f"[bold red]error[/] {exc.code}: {exc.info.message}")
        raise typer.Exit(2) from None

    async def go(engine: Engine) -> None:
        found = list(params)
        if workflow is not None:
            found.append(("workflow_id", str((await engine.get_workflow(workflow)).id)))
        if loop_of is not None:
            found.append(("loop_of", str(await resolve_run_id(engine, loop_of))))
        runs = await engine.search_runs(parse_run_filter(found))
        names = {w.id: w.name for w in await engine.list_workflows(archived=None)}
        console.print(runs_table(runs, names))

    run_with_engine(go)


RUN_ID = typer.Argument(..., help="The run id, or a unique start of it (at least 4 characters).")


@app.command("show")
def show(run_id: str = RUN_ID) -> None:
    """Show a run and its step timeline."""

    async def go(engine: Engine) -> None:
        run = await engine.get_run(await resolve_run_id(engine, run_id))
        workflow = await engine.get_workflow(run.workflow_id)
        console.print(
            f"workflow {workflow.name} v{run.workflow_version}  status {status_text(run.status)}"
            f"  reason {run.status_reason or '-'}  input {short(run.input)}"
        )
        if "vars" in run.state:
            console.print(f"state {short(run.state['vars'], 200)}")
        if run.output is not None:
            console.print(f"output {short(run.output, 200)}")
        if run.error:
            console.print(f"[red]error[/] {short(run.error, 300)}")
        console.print(timeline(run, await engine.list_steps(run.id)))

    run_with_engine(go)


@app.command("cancel")
def cancel(run_id: str = RUN_ID) -> None:
    """Cancel a run (at once, or at its next step boundary while a step runs)."""

    async def go(engine: Engine) -> None:
        run = await engine.cancel_run(await resolve_run_id(engine, run_id))
        when = "canceled" if run.status == "canceled" else "cancel requested (at the next step)"
        console.print(f"run {run.id}: {when}")

    run_with_engine(go)


@app.command("retry")
def retry(run_id: str = RUN_ID) -> None:
    """Retry a failed run from its failed step."""

    async def go(engine: Engine) -> None:
        run = await engine.retry_run(await resolve_run_id(engine, run_id))
        console.print(f"run {run.id}: retrying from step {run.step_seq}")

    run_with_engine(go)


@app.command("rerun")
def rerun(
    run_id: str = RUN_ID,
    from_step: int = typer.Option(..., "--from-step", help="The step (seq) to run again from."),
    version: int | None = typer.Option(None, "--version", help="Rerun on this version (default: the run's)."),
) -> None:
    """Start a new run from where an ended run stood when a step began (earlier steps copied)."""

    async def go(engine: Engine) -> None:
        run = await engine.rerun(await resolve_run_id(engine, run_id), from_step, version=version)
        console.print(
            f"run {run.id}: a rerun of {run_id} from step {from_step} (version {run.workflow_version})"
        )

    run_with_engine(go)


@app.command("resume")
def resume(
    run_id: str = RUN_ID,
    add_model_calls: int | None = typer.Option(None, "--add-model-calls", min=0, help="More model calls."),
    add_tool_calls: int | None = typer.Option(None, "--add-tool-calls", min=0, help="More tool calls."),
    add_tokens: int | None = typer.Option(None, "--add-tokens", min=0, help="More tokens."),
    add_usd: float | None = typer.Option(None, "--add-usd", min=0, help="More USD."),
    add_wall_seconds: float | None = typer.Option(None, "--add-wall-seconds", min=0, help="More wall time."),
) -> None:
    """Resume an agent run a budget suspended, granting it more budget."""
    given = {
        "model_calls": add_model_calls, "tool_calls": add_tool_calls, "tokens": add_tokens, "usd": add_usd,
        "wall_seconds": add_wall_seconds,
    }  # fmt: skip
    add = {k: float(v) for k, v in given.items() if v is not None}

    async def go(engine: Engine) -> None:
        run = await engine.governance.resume(await resolve_run_id(engine, run_id), add)
        console.print(f"run {run.id}: resumed")

    run_with_engine(go)


@app.command("migrate")
def migrate(
    workflow: str = typer.Argument(..., help="Workflow name or id."),
    to_version: int | None = typer.Option(
        None, "--to", min=1, help="The version to move to (default: the latest)."
    ),
    from_version: int | None = typer.Option(None, "--from", min=1, help="Only runs on this version."),
    run: list[str] = typer.Option([], "--run", help="Only this run (id or unique prefix; repeat for more)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would move, move nothing."),
) -> None:
    """Move parked runs (created, waiting, suspended) to another version where they fit."""

    async def go(engine: Engine) -> None:
        found = await engine.get_workflow(workflow)
        ids = [await resolve_run_id(engine, ref) for ref in run] or None
        done = await engine.run_moves.migrate(
            found, to_version=to_version, from_version=from_version, run_ids=ids, dry_run=dry_run
        )
        verb = "would move" if dry_run else "moved"
        for run_id, version in done.moved:
            console.print(f"{verb} run {run_id}: v{version} -> v{done.to_version}")
        for refused in done.refused:
            err_console.print(
                f"run {refused.run_id} stays on v{refused.from_version}: {'; '.join(refused.problems)}"
            )
        console.print(f"{len(done.moved)} {verb}, {len(done.refused)} refused")

    run_with_engine(go)

"""``agentflow report``: what the agent workflows did, the human work it replaced, its cost."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from agentflow.cli.common import console, run_with_engine
from agentflow.core.reports import ImpactReport, human_minutes, summary_line
from agentflow.engine import Engine


def report(
    workflow: str | None = typer.Option(None, "--workflow", "-w", help="One agent workflow (name or id)."),
    account: str | None = typer.Option(None, "--account", "-a", help="Only what was done for this account."),
    since: str | None = typer.Option(
        None, "--since", "-s", help="From this ISO 8601 time (UTC unless it says) or this long ago (7d, 12h)."
    ),
    until: str | None = typer.Option(None, "--until", "-u", help="Up to this time (exclusive), same forms."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """What has this agent done for me? Events and meetings analysed, action items, tasks,
    notifications, plans, the human work it replaced, tokens and cost."""

    async def go(engine: Engine) -> None:
        found = await engine.reports.impact(workflow=workflow, account=account, since=since, until=until)
        if as_json:
            typer.echo(json.dumps(found.to_json(), indent=2))
        else:
            _print_report(found)

    run_with_engine(go)


def _print_report(report: ImpactReport) -> None:
    scope = report.workflow_name or "every agent workflow"
    if report.account_id:
        scope += f", account {report.account_id}"
    since = f"{report.since:%Y-%m-%d %H:%M %Z}" if report.since else "the beginning"
    until = f"{report.until:%Y-%m-%d %H:%M %Z}" if report.until else "now"
    console.print(f"[bold]Impact of {scope}[/] from {since} to {until}", highlight=False)
    console.print(summary_line(report), highlight=False, markup=False)
    if len(report.workflows) < 2:
        return
    table = Table("workflow", "runs", "events", "meetings", "action items", "on time", "late",
                  "notifications", "plans", "human work", "tokens", "cost")  # fmt: skip
    for share in report.workflows:
        f = share.figures
        table.add_row(
            share.workflow_name, f"{f.runs:,}", f"{f.events_analysed:,}", f"{f.meetings_analysed:,}",
            f"{f.action_items:,}", f"{f.tasks_completed_on_time:,}", f"{f.tasks_completed_late:,}",
            f"{f.notifications_sent:,}", f"{f.plans_generated:,}", human_minutes(share.minutes_saved),
            f"{f.total_tokens:,}", f"${f.usd_cost:.4f}",
        )  # fmt: skip
    console.print(table)

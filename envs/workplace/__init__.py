"""A stateful workplace: tickets, employees and email behind several tools; the reward checks the final state.

Each rollout gets its own copy of a small in-memory database (in the
rollout's `State`, so any replica can serve any call): tickets with a status
and an assignee, employees with a team and an email address, and an outbox.
The model reads and changes it through tools (`list_tickets`,
`find_employees`, `assign_ticket`, `set_ticket_status`, `send_email`).

Rows carry the instruction and a `goal`: the fields some tickets must end
with, and emails that must have been sent (recipient + a text the body or
subject must contain). Reward: 1.0 when every goal holds and no ticket
outside the goal was changed (so editing everything is not a strategy), else
0.0. This follows the shape of NeMo Gym's workplace_assistant environment; its
dataset's rows map onto `goal` the same way.
"""

from __future__ import annotations

from pydantic import BaseModel

from gym_serve import Environment, Response, Task, Verdict, tool

STATUSES = ("open", "in_progress", "closed")


class Ticket(BaseModel):
    id: str
    title: str
    status: str = "open"
    assignee: str | None = None


class Employee(BaseModel):
    name: str
    team: str
    email: str


class Email(BaseModel):
    to: str
    subject: str
    body: str


class Office(BaseModel):
    tickets: dict[str, Ticket] = {}
    employees: list[Employee] = []
    outbox: list[Email] = []


class EmailGoal(BaseModel):
    to: str
    contains: str


class Goal(BaseModel):
    tickets: dict[str, dict[str, str | None]] = {}
    emails: list[EmailGoal] = []


class WorkTask(Task):
    goal: Goal


def initial_office() -> Office:
    tickets = [
        Ticket(id="T-1", title="VPN drops every hour", assignee="dana"),
        Ticket(id="T-2", title="Printer on floor 3 jams"),
        Ticket(id="T-3", title="New laptop for Sam", status="in_progress", assignee="lee"),
        Ticket(id="T-4", title="Update the expense policy page"),
        Ticket(id="T-5", title="Password reset for Kim", status="closed", assignee="dana"),
    ]
    employees = [
        Employee(name="dana", team="it", email="dana@example.com"),
        Employee(name="lee", team="it", email="lee@example.com"),
        Employee(name="omar", team="facilities", email="omar@example.com"),
        Employee(name="rita", team="finance", email="rita@example.com"),
    ]
    return Office(tickets={t.id: t for t in tickets}, employees=employees)


class Workplace(Environment[WorkTask, Office]):
    async def reset(self, task: WorkTask) -> Office:
        return initial_office()

    @tool
    async def list_tickets(self, state: Office, status: str | None = None) -> list[dict]:
        """List tickets, optionally only those with one status.

        Args:
            status: `open`, `in_progress` or `closed`; omit for all tickets.
        """
        return [t.model_dump() for t in state.tickets.values() if status is None or t.status == status]

    @tool
    async def find_employees(self, state: Office, team: str | None = None) -> list[dict]:
        """List employees (name, team, email), optionally of one team.

        Args:
            team: e.g. `it`, `facilities`, `finance`; omit for everyone.
        """
        return [e.model_dump() for e in state.employees if team is None or e.team == team]

    @tool
    async def assign_ticket(self, state: Office, ticket_id: str, assignee: str) -> dict:
        """Assign a ticket to an employee.

        Args:
            ticket_id: The ticket's id, e.g. `T-2`.
            assignee: The employee's name.
        """
        ticket = self._ticket(state, ticket_id)
        if assignee not in {e.name for e in state.employees}:
            raise ValueError(f"no employee named {assignee!r}")
        ticket.assignee = assignee
        return ticket.model_dump()

    @tool
    async def set_ticket_status(self, state: Office, ticket_id: str, status: str) -> dict:
        """Change a ticket's status.

        Args:
            ticket_id: The ticket's id, e.g. `T-2`.
            status: `open`, `in_progress` or `closed`.
        """
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}")
        ticket = self._ticket(state, ticket_id)
        ticket.status = status
        return ticket.model_dump()

    @tool
    async def send_email(self, state: Office, to: str, subject: str, body: str) -> dict:
        """Send an email.

        Args:
            to: The recipient's address.
            subject: The subject line.
            body: The message.
        """
        state.outbox.append(Email(to=to, subject=subject, body=body))
        return {"sent": True, "to": to}

    def _ticket(self, state: Office, ticket_id: str) -> Ticket:
        if ticket_id not in state.tickets:
            raise ValueError(f"no ticket {ticket_id!r}; ids look like T-1")
        return state.tickets[ticket_id]

    async def verify(self, task: WorkTask, response: Response, state: Office) -> Verdict:
        start = initial_office().tickets
        wanted = task.goal.tickets
        goals_met = all(
            getattr(state.tickets[tid], field) == value
            for tid, fields in wanted.items()
            for field, value in fields.items()
        )
        untouched = all(state.tickets[tid] == start[tid] for tid in start if tid not in wanted)
        emails_met = all(
            any(m.to == g.to and g.contains.lower() in (m.subject + " " + m.body).lower() for m in state.outbox)
            for g in task.goal.emails
        )
        reward = 1.0 if goals_met and untouched and emails_met else 0.0
        return Verdict(
            reward=reward,
            components={"tickets": float(goals_met), "untouched": float(untouched), "emails": float(emails_met)},
        )

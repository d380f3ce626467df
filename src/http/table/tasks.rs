//! The agents' operations: tasks, the reports on them, and a BYOK org's data key.

use axum::http::StatusCode;
use taskq_actors::api::*;
use taskq_actors::Caller;

use super::super::operation::Operation;
use super::super::AppState;

type S = AppState;
type C = Caller;

pub(super) fn operations() -> Vec<Operation> {
    vec![
        // ---- tasks
        Operation::post("/tasks")
            .doc("create_tasks", "tasks", "Create 1 to 25 tasks in one all-or-nothing call")
            .tool("Create 1 to 25 tasks in one all-or-nothing call; items may block each other with `ref:<name>` in blocked_by. Returns each task's id and status (pending, or blocked while a blocker is open).")
            .writes(None)
            .body()
            .answer::<CreateAnswer>(201, "Every task was created")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: CreateTasks| async move { s.engine.create_tasks(&c, r).await }),
        Operation::get("/tasks")
            .doc("list_tasks", "tasks", "List the org's tasks, open work first, a page at a time")
            .tool("List the org's tasks, open work first, filtered by status, tags, assignee, parent or priority. Returns a page of lean items (or whole tasks with full=true) and a next_cursor for the next page.")
            .read_only()
            .reads(None)
            .query()
            .answer::<ListAnswer>(200, "A page of tasks and the cursor of the next")
            .errors(&[500])
            .member(|s: S, c: C, (): (), r: ListTasks| async move { s.engine.list_tasks(&c, r).await }),
        Operation::post("/tasks/update")
            .doc("update_tasks", "tasks", "Change 1 to 25 tasks, each item attempted in order")
            .tool("Change 1 to 25 tasks: status (with a note for completed, failed or canceled), output, metadata, tags, assignee, priority, blockers. Send the claim's lease_id so a lost lease fails the item; each item reports applied or its own error.")
            .writes(None)
            .body()
            .answer::<UpdateAnswer>(200, "Every item applied")
            .answer::<UpdateAnswer>(207, "Some items failed (`partial: true`); each result says why")
            .errors(&[500])
            .member_with_status(
                |s: S, c: C, (): (), r: UpdateTasks| async move { s.engine.update_tasks(&c, r).await },
                |a| a.partial.then_some(StatusCode::MULTI_STATUS),
            ),
        Operation::post("/tasks/get")
            .doc("get_tasks", "tasks", "Fetch 1 to 25 tasks by id; one id also returns its history")
            .tool("Fetch 1 to 25 tasks by id with their content and blockers' statuses; asking for one id also returns its history of status changes.")
            .read_only()
            .reads(None)
            .body()
            .answer::<GetAnswer>(200, "The tasks found and the ids not found")
            .errors(&[500])
            .member(|s: S, c: C, (): (), r: GetTasks| async move { s.engine.get_tasks(&c, r).await }),
        Operation::post("/tasks/claim")
            .doc("claim_task", "tasks", "Take the next pending task (or up to `count` tasks) under a time-limited lease")
            .tool("Take the next pending task to work on (optionally only with given tags) under a time-limited lease. Returns the task with its lease_id and a briefing context, or null when nothing is waiting (after up to wait_seconds of waiting for one, when given). With count (1 to 25), claims up to that many tasks, each with its own lease, and returns {tasks: [...]}.")
            .writes(None)
            .body()
            .answer::<ClaimAnswer>(200, "The claimed task with its lease, or `null` when nothing is waiting; with `count`, `{tasks: [...]}`, each with its own lease")
            .errors(&[500])
            .member(|s: S, c: C, (): (), r: ClaimRequest| async move { s.engine.claim_answer(&c, r).await }),
        Operation::post("/tasks/search")
            .doc("search_tasks", "tasks", "Recall tasks by meaning from the org's history")
            .tool("Recall tasks by meaning from the org's history (1 to 25 results, best first). Answers {available: false, reason} when the org is client-encrypted (byok) or the server has no embedding model (not_configured).")
            .read_only()
            .reads(None)
            .body()
            .answer::<SearchAnswer>(200, "The best matches, or `{available: false, reason}`")
            .errors(&[500])
            .member(|s: S, c: C, (): (), r: SearchTasks| async move { s.engine.search_tasks(&c, r).await }),
        Operation::post("/tasks/plan")
            .doc("plan_tasks", "reports", "Turn a goal into a task graph grounded on the org's history (pro and enterprise)")
            .tool("Turn a goal into a task graph grounded on the org's history (similar tasks, cycle time, the tag that fails most, the best runbook); with create: true the drafted tasks are created. Pro and enterprise; each call counts against the monthly plan allowance.")
            .writes(Some(PLANNING))
            .body()
            .answer::<PlanAnswer>(200, "The plan, the tasks created if asked, or `{available: false, reason}`")
            .errors(&[429, 502])
            .member(|s: S, c: C, (): (), r: PlanRequest| async move { s.engine.plan_tasks(&c, r).await }),
        // ---- reports
        Operation::get("/insights")
            .doc("get_insights", "reports", "Flow insights: stuck and churning tasks, throughput, cycle times, failure rates, agents (paid plans)")
            .tool("Flow insights over the last 30 days: stuck and churning tasks, throughput, cycle times, failure rates by tag, per-agent figures, and failure clusters on pro and enterprise. Paid plans; {available: false, reason: not_computed_yet} before the first computation.")
            .read_only()
            .reads(Some(INSIGHTS))
            .query()
            .answer::<InsightsAnswer>(200, "The last computed insights, or `{available: false, reason}`")
            .errors(&[500])
            .member(|s: S, c: C, (): (), _: InsightsQuery| async move { s.engine.insights(&c).await }),
        Operation::get("/runbooks")
            .doc("list_runbooks", "reports", "Runbooks distilled from clusters of completed tasks (pro and enterprise)")
            .tool("Runbooks distilled from clusters of the org's completed tasks, newest first (pro and enterprise; {available: false, reason: byok} for client-encrypted orgs).")
            .read_only()
            .reads(Some(RUNBOOKS))
            .query()
            .answer::<RunbooksAnswer>(200, "The runbooks, newest first, or `{available: false, reason}`")
            .errors(&[500])
            .member(|s: S, c: C, (): (), _: RunbooksQuery| async move { s.engine.runbooks(&c).await }),
        Operation::get("/standup")
            .doc("get_standup", "reports", "A standup report of the org or a team, with its history (paid plans)")
            .tool("A standup report: scope `org` or `team:<name>`, cadence daily, weekly or monthly, period YYYY-MM-DD, YYYY-Www or YYYY-MM; the headline figures with their change since the previous report, a body, and up to 10 earlier reports. Paid plans.")
            .read_only()
            .reads(Some(STANDUP))
            .query()
            .answer::<StandupAnswer>(200, "The report, or `{available: false, reason}`")
            .errors(&[404, 500])
            .member(|s: S, c: C, (): (), r: StandupQuery| async move { s.engine.standup(&c, r).await }),
        // ---- the org's data key
        Operation::get("/org/dek")
            .doc("get_org_dek", "keys", "A BYOK org's wrapped data key")
            .tool("A client-encrypted (BYOK) org's data key, wrapped by the org's KMS, with its kms_key_id. Errors when the org's keys are managed by the server (clients must not encrypt) or none is enrolled yet.")
            .read_only()
            .reads(None)
            .answer::<OrgDekView>(200, "The wrapped data key")
            .errors(&[404, 409])
            .member(|s: S, c: C, (): (), _: NoArguments| async move { s.engine.org_dek(&c).await }),
        Operation::put("/org/dek")
            .doc("put_org_dek", "keys", "Enroll a BYOK org's wrapped data key, once")
            .tool("Enroll a BYOK org's data key once (owners only): wrapped_dek (base64, wrapped by the org's KMS) and kms_key_id (stored verbatim).")
            .writes(None)
            .body()
            .answer::<OrgDekCreated>(201, "The data key is enrolled")
            .errors(&[409])
            .member(|s: S, c: C, (): (), r: PutOrgDek| async move { s.engine.put_org_dek(&c, r).await }),
    ]
}

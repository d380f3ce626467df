//! The builder gives one operation whatever order its parts are written in.

use serde_json::json;
use taskq_actors::api::{Recompute, Recomputed, UpdateAnswer, UpdateTasks};
use taskq_actors::domain::OrgId;

use super::*;
use crate::http::ApiError;

/// Everything the table says of an operation and does with it: its
/// document, its tool, its request, what it is counted as, its success.
fn what_it_is(operation: &Operation) -> Value {
    let mut requests = SchemaGenerator::default();
    let mut answers = SchemaGenerator::default();
    let input = match operation.input() {
        Input::None => json!("none"),
        Input::Body(schema, required) => {
            json!({"body": schema(&mut requests), "required": required})
        }
        Input::Form(schema) => json!({"form": schema(&mut requests)}),
        Input::Query(schema) => json!({"query": schema(&mut requests)}),
    };
    json!({
        "document": super::super::openapi::operation(operation, &mut requests, &mut answers),
        "input": input,
        "tool": operation.tool,
        "read_only": operation.read_only,
        "tool_schema": operation.tool_input_schema(),
        "access": format!("{:?}", operation.access),
        "terms": format!("{:?}", operation.terms()),
        "success": operation.success().as_u16(),
        "member": operation.member_call().is_some(),
        "org_of": format!("{:?}", operation.org_of()),
    })
}

async fn update(
    state: AppState,
    caller: taskq_actors::Caller,
    (): (),
    request: UpdateTasks,
) -> Result<UpdateAnswer, taskq_actors::EngineError> {
    state.engine.update_tasks(&caller, request).await
}

fn partial(answer: &UpdateAnswer) -> Option<StatusCode> {
    answer.partial.then_some(StatusCode::MULTI_STATUS)
}

#[test]
fn a_members_operation_is_the_same_in_any_order() {
    let written = Operation::post("/tasks/update")
        .doc("update_tasks", "tasks", "Change tasks")
        .tool("Change tasks.")
        .writes(Some("feature"))
        .body()
        .answer::<UpdateAnswer>(200, "Every item applied")
        .answer::<UpdateAnswer>(207, "Some items failed")
        .errors(&[500, 409])
        .member_with_status(update, partial);
    let reversed = Operation::post("/tasks/update")
        .member_with_status(update, partial)
        .errors(&[409])
        .answer::<UpdateAnswer>(207, "Some items failed")
        .errors(&[500, 409])
        .answer::<UpdateAnswer>(200, "Every item applied")
        .body()
        .writes(Some("feature"))
        .tool("Change tasks.")
        .doc("update_tasks", "tasks", "Change tasks");
    assert_eq!(what_it_is(&written), what_it_is(&reversed));
    // And it is the operation meant: its body, its count, its success.
    assert!(matches!(written.input(), Input::Body(_, true)));
    assert_eq!(
        written.terms(),
        Some(Terms {
            kind: RequestKind::Write,
            feature: Some("feature"),
            success: StatusCode::OK,
        })
    );
    assert!(written.tool_input_schema().is_some());
    assert_eq!(written.org_of(), OrgOf::Key);
}

#[test]
fn an_operators_operation_is_the_same_in_any_order() {
    async fn recompute(
        state: AppState,
        org: String,
        request: Recompute,
    ) -> Result<Recomputed, ApiError> {
        let org: OrgId = taskq_actors::parse_org_id(&org)?;
        Ok(state.engine.recompute(org, request).await?)
    }
    let written = Operation::post("/admin/orgs/{org_id}/recompute")
        .doc(
            "recompute_reports",
            "operator",
            "Compute an org's reports now",
        )
        .access(Access::Operator)
        .body()
        .answer::<Recomputed>(201, "Computed")
        .errors(&[503])
        .operator(recompute);
    let reversed = Operation::post("/admin/orgs/{org_id}/recompute")
        .operator(recompute)
        .errors(&[503])
        .answer::<Recomputed>(201, "Computed")
        .body()
        .access(Access::Operator)
        .doc(
            "recompute_reports",
            "operator",
            "Compute an org's reports now",
        );
    assert_eq!(what_it_is(&written), what_it_is(&reversed));
    assert!(matches!(written.input(), Input::Body(_, false)));
    assert_eq!(written.success(), StatusCode::CREATED);
    assert_eq!(written.terms(), None);
    assert_eq!(written.tool_input_schema(), None);
    assert_eq!(written.org_of(), OrgOf::Path);
}

//! The board's figures as people read them, through the real server: the
//! columns' counts say whether they are totals, insights average over the
//! days the org has existed, charts pick their unit and say when they have
//! nothing to draw, attempts and retries say what they count, times read
//! as wall-clock times (a schedule's in its own zone) with the exact
//! instant kept, and the search box is offered only where search works.

use super::{get, sign_in};
use crate::common::*;
use crate::search::stub::Stub;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_box_is_offered_only_where_search_works() {
    // No embedder: no box, and a search asked anyway says why.
    let srv = TestServer::start(Backend::Sqlite).await;
    let org = srv.create_org("dev").await;
    let cookie = sign_in(&srv, &org.owner_key).await;
    let page = get(&srv, "/board/tasks", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("id=\"f-q\""), "{}", page.body);
    let page = get(&srv, "/board/tasks?q=anything", Some(&cookie)).await;
    assert!(
        page.body.contains("id=\"search-unavailable\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("not_configured"), "{}", page.body);
    drop(srv);

    // An embedder: the box for a managed org, none for a BYOK one.
    let stub = Stub::start().await;
    let srv = TestServer::builder(Backend::Sqlite)
        .env("TASKQ_EMBEDDINGS", &stub.url)
        .env("TASKQ_EMBEDDINGS_MODEL", "stub-model")
        .env("TASKQ_EMBEDDINGS_API_KEY", "stub-secret")
        .start()
        .await;
    let managed = srv.create_org("dev").await;
    let cookie = sign_in(&srv, &managed.owner_key).await;
    let page = get(&srv, "/board/tasks", Some(&cookie)).await;
    assert!(page.body.contains("id=\"f-q\""), "{}", page.body);
    let byok = srv
        .create_org_with(json!({ "tier": "dev", "encryption": "byok" }))
        .await;
    let cookie = sign_in(&srv, &byok.owner_key).await;
    let page = get(&srv, "/board/tasks", Some(&cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("id=\"f-q\""), "{}", page.body);
}

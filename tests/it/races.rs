//! Changes of shared records sent at the same moment: each round sends
//! them together and then checks the end state, not only the statuses,
//! so a change that answered 200 and was then undone by another fails.
//! Fifty rounds each, so a loss one round in ten fails the test.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::limits::*;
use crate::common::*;
use reqwest::Method;

const ROUNDS: usize = 50;
/// Strikes across one org's members that suspend it.
const ORG_STRIKE_LIMIT: usize = 10;

async fn org_view(srv: &TestServer, org: &Org) -> Value {
    let (status, body) = srv
        .admin(Method::GET, &format!("/admin/orgs/{}", org.org_id), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn patch_org(srv: &TestServer, org: &Org, body: Value) {
    let (status, resp) = srv
        .admin(
            Method::PATCH,
            &format!("/admin/orgs/{}", org.org_id),
            Some(body.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "PATCH {body}: {resp}");
}

backend_tests!(
    operator_patches_of_different_fields_all_land,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let tiers = ["pro", "enterprise", "free", "dev"];
        for round in 0..ROUNDS {
            let tier = tiers[round % tiers.len()];
            let seats = 10 + round as i64;
            let suspended = round % 2 == 0;
            let writes = 1_000 + round as i64;
            tokio::join!(
                patch_org(&srv, &org, json!({ "tier": tier })),
                patch_org(&srv, &org, json!({ "seats": seats })),
                patch_org(&srv, &org, json!({ "suspended": suspended })),
                patch_org(
                    &srv,
                    &org,
                    json!({ "limits": { "writes_per_minute": writes } })
                ),
            );
            let view = org_view(&srv, &org).await;
            assert_eq!(
                (
                    &view["tier"],
                    &view["seats"],
                    &view["suspended"],
                    &view["limits"]["writes_per_minute"],
                    // Lifted when the org was made; no PATCH named it.
                    &view["limits"]["reads_per_minute"],
                ),
                (
                    &json!(tier),
                    &json!(seats),
                    &json!(suspended),
                    &json!(writes),
                    &Value::Null,
                ),
                "round {round}: {view}"
            );
            // The next request sees the suspension, or its lifting.
            let (status, body) = srv.get(&org.owner_key, "/tasks").await;
            let expected = if suspended {
                StatusCode::FORBIDDEN
            } else {
                StatusCode::OK
            };
            assert_eq!(status, expected, "round {round}: {body}");
        }
    }
);

backend_tests!(
    strikes_suspend_the_org_whatever_the_operator_changes_meanwhile,
    |srv| async move {
        for round in 0..ROUNDS {
            // Seats for all, so the seat-billed tiers below leave every
            // member's key working.
            let org = srv
                .create_org_with(json!({ "tier": "dev", "seats": 20 }))
                .await;
            let mut keys = vec![org.owner_key.clone()];
            for m in 1..ORG_STRIKE_LIMIT {
                let email = format!("{}@example.com", unique(&format!("m{m}")));
                keys.push(srv.add_member(&org, &email, "user").await);
            }
            // The operator changes the tier over and over while the strikes
            // land, and once more after.
            let struck = AtomicBool::new(false);
            let strikes = async {
                futures::future::join_all(keys.iter().map(|k| feedback_rejected(&srv, k, ABUSE)))
                    .await;
                struck.store(true, Ordering::SeqCst);
            };
            let tiers = async {
                for tier in ["enterprise", "pro"].iter().cycle() {
                    patch_org(&srv, &org, json!({ "tier": tier })).await;
                    if struck.load(Ordering::SeqCst) {
                        break;
                    }
                }
                patch_org(&srv, &org, json!({ "tier": "pro" })).await;
            };
            tokio::join!(strikes, tiers);
            let view = org_view(&srv, &org).await;
            assert_eq!(
                (&view["suspended"], &view["tier"]),
                (&json!(true), &json!("pro")),
                "round {round}: {view}"
            );
            let (status, body) = srv.get(&keys[1], "/tasks").await;
            assert_eq!(status, StatusCode::FORBIDDEN, "round {round}: {body}");
        }
    }
);

backend_tests!(
    seat_grants_and_role_changes_of_one_member_both_land,
    |srv| async move {
        let org = srv.create_org("pro").await;
        let email = "seat@example.com";
        let member_key = srv.add_member(&org, email, "user").await;
        let owner = &org.owner_key;
        for round in 0..ROUNDS {
            let (seated, role) = if round % 2 == 0 {
                (false, "admin")
            } else {
                (true, "user")
            };
            let path = format!("/members/{email}");
            let (a, b) = tokio::join!(
                srv.patch(owner, &path, json!({ "seated": seated })),
                srv.patch(owner, &path, json!({ "role": role })),
            );
            assert_eq!(a.0, StatusCode::OK, "round {round}: {}", a.1);
            assert_eq!(b.0, StatusCode::OK, "round {round}: {}", b.1);
            let m = srv.member(owner, email).await;
            assert_eq!(
                (&m["seated"], &m["role"]),
                (&json!(seated), &json!(role)),
                "round {round}: {m}"
            );
            // The very next request of the member sees the seat.
            let (status, body) = srv.get(&member_key, "/tasks").await;
            let expected = if seated {
                StatusCode::OK
            } else {
                StatusCode::UNAUTHORIZED
            };
            assert_eq!(status, expected, "round {round}: {body}");
        }
    }
);

/// `{email: sorted sources}` of a team's memberships.
async fn team_sources(srv: &TestServer, key: &str, team: &str) -> Value {
    let team = srv.get_team(key, team).await;
    let mut out = serde_json::Map::new();
    for m in team["members"].as_array().expect("members") {
        out.insert(str_field(m, "email"), json!(sorted_strings(&m["sources"])));
    }
    Value::Object(out)
}

backend_tests!(
    membership_by_hand_and_identity_provider_sync_both_land,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let owner = &org.owner_key;
        let email = "both@example.com";
        srv.add_member(&org, email, "user").await;
        srv.create_team(owner, json!({ "name": "eng" })).await;
        srv.idp_enroll(&org, true).await;
        for round in 0..ROUNDS {
            let (by_hand, synced) = tokio::join!(
                srv.post(owner, "/teams/eng/members", json!({ "email": email })),
                srv.idp_sync(&org, json!({ "eng": [email] })),
            );
            assert_eq!(
                by_hand.0,
                StatusCode::CREATED,
                "round {round}: {}",
                by_hand.1
            );
            assert_eq!(synced.0, StatusCode::OK, "round {round}: {}", synced.1);
            assert_eq!(
                team_sources(&srv, owner, "eng").await,
                json!({ email: ["idp", "manual"] }),
                "round {round}"
            );
            // Both sources go at once: the membership goes with the last.
            let path = format!("/teams/eng/members/{email}");
            let (removed, synced) = tokio::join!(
                srv.delete(owner, &path),
                srv.idp_sync(&org, json!({ "eng": [] })),
            );
            assert_eq!(
                removed.0,
                StatusCode::NO_CONTENT,
                "round {round}: {}",
                removed.1
            );
            assert_eq!(synced.0, StatusCode::OK, "round {round}: {}", synced.1);
            assert_eq!(
                team_sources(&srv, owner, "eng").await,
                json!({}),
                "round {round}"
            );
        }
    }
);

backend_tests!(
    no_request_with_a_revoked_key_succeeds_after_the_revoke_answered,
    |srv| async move {
        let org = srv.create_org("dev").await;
        let owner = &org.owner_key;
        for round in 0..ROUNDS {
            // A key never used yet, so the requests racing its revocation
            // authenticate from the store, not from the server's cache.
            let (key_id, key) = srv.new_key(owner, &unique("racer")).await;
            let revoked = AtomicBool::new(false);
            let user = |lane: usize| {
                let (key, revoked) = (&key, &revoked);
                let srv = &srv;
                async move {
                    let mut after = 0;
                    let mut seen = Vec::new();
                    while after < 3 {
                        let sent_after = revoked.load(Ordering::SeqCst);
                        let (status, body) = srv.get(key, "/tasks?limit=1").await;
                        if sent_after {
                            after += 1;
                            assert_eq!(
                                status,
                                StatusCode::UNAUTHORIZED,
                                "round {round}, lane {lane}: a request sent after the \
                                 revocation answered: {body}"
                            );
                        } else {
                            seen.push(status);
                        }
                    }
                    seen
                }
            };
            let revoke = async {
                let (status, body) = srv.delete(owner, &format!("/keys/{key_id}")).await;
                assert_eq!(status, StatusCode::NO_CONTENT, "round {round}: {body}");
                revoked.store(true, Ordering::SeqCst);
            };
            let (_, a, b, c) = tokio::join!(revoke, user(0), user(1), user(2));
            for status in a.into_iter().chain(b).chain(c) {
                assert!(
                    status == StatusCode::OK || status == StatusCode::UNAUTHORIZED,
                    "round {round}: {status}"
                );
            }
        }
    }
);

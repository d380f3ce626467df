//! Starting on a database written under another master key: the engine
//! refuses, names the key it lacks, and changes nothing, so the right key
//! still opens everything.

use crate::support::TempDir;
use taskq_actors::crypto::MasterKey;
use taskq_actors::{Engine, EngineConfig};

fn new_key() -> MasterKey {
    MasterKey::from_base64(&MasterKey::generate_base64()).expect("key")
}

#[tokio::test]
async fn a_database_under_another_master_key_is_refused_by_name() {
    let dir = TempDir::new("taskq-master-key");
    let url = format!("sqlite://{}/taskq.db", dir.0.display());
    let written_with = new_key();
    let written_id = written_with.id().to_owned();

    // The first start creates the feedback org, whose data key the master
    // key wraps.
    let engine = Engine::start(EngineConfig::new(url.clone(), written_with.clone()))
        .await
        .expect("first start");
    engine.shutdown().await;

    let Err(refused) = Engine::start(EngineConfig::new(url.clone(), new_key())).await else {
        panic!("an engine without the database's master key started");
    };
    let message = refused.to_string();
    assert!(
        message.contains(&written_id) && message.contains("does not hold"),
        "{message}"
    );

    let engine = Engine::start(EngineConfig::new(url, written_with))
        .await
        .expect("the right key still starts");
    engine.shutdown().await;
}

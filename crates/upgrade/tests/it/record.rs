//! The run's record on a real API server: two runs reading the same record cannot both
//! write it; the second is told another run is going on.

use simplyblock_testenv::TestEnv;
use simplyblock_upgrade::Stage;
use simplyblock_upgrade::record::{Error, Store};

#[tokio::test]
async fn a_second_run_writing_a_record_it_read_before_the_first_wrote_is_refused() {
    let env = TestEnv::shared().expect("API server");
    let client = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&client, "upgrade-record")
        .await
        .expect("namespace");
    let store = Store::new(&client, "upgrade-record");

    // Two runs start from no record; the first creates it, the second's create conflicts.
    let mut first = store.load(Stage::Migrate).await.expect("load");
    let mut second = store.load(Stage::Migrate).await.expect("load");
    first.phase = "Validating".into();
    store.save(&mut first).await.expect("the first run records");
    second.phase = "Validating".into();
    assert!(matches!(
        store.save(&mut second).await,
        Err(Error::Contended)
    ));

    // Both read it now; the first writes again, so the second's copy is stale.
    let mut second = store.load(Stage::Migrate).await.expect("load");
    first.completed.insert("smoke-test-conversion".into());
    store.save(&mut first).await.expect("the first run records");
    second.phase = "Ownership".into();
    let refused = store.save(&mut second).await.expect_err("stale");
    assert!(
        refused
            .to_string()
            .contains("another simplyblock-upgrade is running"),
        "{refused}"
    );
    assert!(matches!(store.finish(&second).await, Err(Error::Contended)));

    // What the first wrote is what a resumed run reads; finishing deletes it.
    let resumed = store.load(Stage::Migrate).await.expect("load");
    assert_eq!(resumed.phase, "Validating");
    assert!(resumed.completed.contains("smoke-test-conversion"));
    store.finish(&resumed).await.expect("finished");
    let fresh = store.load(Stage::Upgrade).await.expect("load");
    assert_eq!(
        (fresh.stage.as_str(), fresh.phase.as_str()),
        ("upgrade", "")
    );
}

use super::*;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn column(name: &str, kind: Kind, key: Option<i64>) -> Column {
    Column {
        name: name.into(),
        kind: Some(kind),
        key,
    }
}

#[test]
fn tables_leave_out_bookkeeping_and_node_state_and_order_parents_first() {
    let source = names(&["tasks", "orgs", "_sqlx_migrations", "sqlite_sequence"]);
    let destination = names(&[
        "orgs",
        "cluster_nodes",
        "org_owners",
        "tasks",
        "_sqlx_migrations",
    ]);
    assert_eq!(
        tables_to_copy(&source, &destination, &[]).unwrap(),
        ["orgs", "tasks"]
    );
    let references = vec![
        ("orgs".to_string(), "tasks".to_string()),
        ("tasks".to_string(), "tasks".to_string()),
    ];
    assert_eq!(
        tables_to_copy(&source, &destination, &references).unwrap(),
        ["tasks", "orgs"],
        "a parent first, a self-reference ignored"
    );
}

#[test]
fn tables_that_differ_or_reference_each_other_in_a_cycle_are_refused() {
    let error = tables_to_copy(
        &names(&["orgs", "tasks"]),
        &names(&["orgs", "members"]),
        &[],
    )
    .unwrap_err();
    assert!(error.contains("only in the source: [tasks]"), "{error}");
    assert!(
        error.contains("only in the destination: [members]"),
        "{error}"
    );
    let cycle = vec![
        ("a".to_string(), "b".to_string()),
        ("b".to_string(), "a".to_string()),
    ];
    let tables = names(&["a", "b", "c"]);
    let error = tables_to_copy(&tables, &tables, &cycle).unwrap_err();
    assert!(error.contains("[a, b]"), "{error}");
}

#[test]
fn a_store_must_be_at_the_latest_migration() {
    assert_eq!(schema_check("source", &[1, 2, 3], &[1, 2, 3]), Ok(()));
    let older = schema_check("source", &[1, 2], &[1, 2, 3]).unwrap_err();
    assert!(
        older.contains("lacks migrations of this version (0003)"),
        "{older}"
    );
    let newer = schema_check("source", &[1, 2, 3, 4], &[1, 2, 3]).unwrap_err();
    assert!(newer.contains("does not know (0004)"), "{newer}");
}

#[test]
fn kinds_follow_each_dialects_types() {
    assert_eq!(sqlite_kind("INTEGER"), Kind::Int);
    assert_eq!(sqlite_kind("BIGINT"), Kind::Int);
    assert_eq!(sqlite_kind("TEXT"), Kind::Text);
    assert_eq!(sqlite_kind("BLOB"), Kind::Bytes);
    assert_eq!(sqlite_kind(""), Kind::Bytes);
    assert_eq!(postgres_kind("bigint"), Some(Kind::Int));
    assert_eq!(postgres_kind("bytea"), Some(Kind::Bytes));
    assert_eq!(postgres_kind("boolean"), Some(Kind::Bool));
    assert_eq!(postgres_kind("timestamp with time zone"), None);
}

#[test]
fn columns_pair_by_name_in_the_destinations_order_keyed_as_the_source() {
    let source = vec![
        column("task_id", Kind::Text, Some(2)),
        column("org_id", Kind::Text, Some(1)),
        column("title", Kind::Bytes, None),
        column("sent", Kind::Int, None),
    ];
    let destination = vec![
        column("org_id", Kind::Text, Some(1)),
        column("sent", Kind::Bool, None),
        column("task_id", Kind::Text, Some(2)),
        column("title", Kind::Bytes, None),
    ];
    let cols = matched_columns("tasks", &source, &destination).unwrap();
    assert_eq!(cols.names, ["org_id", "sent", "task_id", "title"]);
    assert_eq!(cols.from, [Kind::Text, Kind::Int, Kind::Text, Kind::Bytes]);
    assert_eq!(cols.to, [Kind::Text, Kind::Bool, Kind::Text, Kind::Bytes]);
    assert_eq!(cols.key, [0, 2]);

    let fewer = &destination[..3];
    let error = matched_columns("tasks", &source, fewer).unwrap_err();
    assert!(error.contains("table tasks has columns"), "{error}");
    let unkeyed: Vec<Column> = source
        .iter()
        .map(|c| Column {
            key: None,
            ..c.clone()
        })
        .collect();
    let error = matched_columns("tasks", &unkeyed, &destination).unwrap_err();
    assert!(error.contains("no primary key"), "{error}");
    let mut odd = destination.clone();
    odd[1].kind = None;
    let error = matched_columns("tasks", &source, &odd).unwrap_err();
    assert!(error.contains("tasks.sent"), "{error}");
}

#[test]
fn a_column_that_holds_no_data_may_be_on_one_side_only() {
    let source = vec![
        column("task_id", Kind::Text, Some(1)),
        column("slack", Kind::Bytes, None),
    ];
    let destination = vec![column("task_id", Kind::Text, Some(1))];
    let cols = matched_columns("tasks", &source, &destination).unwrap();
    assert_eq!(cols.names, ["task_id"]);
    let cols = matched_columns("tasks", &destination, &source).unwrap();
    assert_eq!(cols.names, ["task_id"], "left NULL in the destination");
    let error = matched_columns("orgs", &source, &destination).unwrap_err();
    assert!(error.contains("[slack, task_id]"), "{error}");
}

#[test]
fn values_cross_unchanged() {
    let bytes = vec![0, 159, 146, 150, 255];
    assert_eq!(
        fit(Value::Bytes(bytes.clone()), Kind::Bytes),
        Ok(Value::Bytes(bytes.clone()))
    );
    assert_eq!(
        fit(Value::Text("{\"a\": 1}".into()), Kind::Text),
        Ok(Value::Text("{\"a\": 1}".into()))
    );
    assert_eq!(
        fit(Value::Text("é".into()), Kind::Bytes),
        Ok(Value::Bytes("é".as_bytes().to_vec()))
    );
    assert_eq!(
        fit(Value::Bytes(b"ok".to_vec()), Kind::Text),
        Ok(Value::Text("ok".into()))
    );
    assert!(fit(Value::Bytes(bytes), Kind::Text).is_err());
    assert_eq!(
        fit(Value::Int(i64::MAX), Kind::Int),
        Ok(Value::Int(i64::MAX))
    );
    assert_eq!(fit(Value::Int(1), Kind::Bool), Ok(Value::Bool(true)));
    assert_eq!(fit(Value::Bool(false), Kind::Int), Ok(Value::Int(0)));
    assert!(fit(Value::Int(2), Kind::Bool).is_err());
    assert!(fit(Value::Int(2), Kind::Text).is_err());
    assert_eq!(fit(Value::Null, Kind::Bytes), Ok(Value::Null));
}

fn two_key_columns() -> Columns {
    Columns {
        names: names(&["org_id", "task_id", "priority"]),
        from: vec![Kind::Text, Kind::Text, Kind::Int],
        to: vec![Kind::Text, Kind::Text, Kind::Int],
        key: vec![0, 1],
    }
}

#[test]
fn pages_follow_the_primary_key() {
    let cols = two_key_columns();
    assert_eq!(
        page_query("tasks", &cols, false, false),
        format!(
            "SELECT \"org_id\", \"task_id\", \"priority\" FROM \"tasks\" \
             ORDER BY \"org_id\", \"task_id\" LIMIT {PAGE_ROWS}"
        )
    );
    assert_eq!(
        page_query("tasks", &cols, true, true),
        format!(
            "SELECT \"org_id\", \"task_id\", CAST(\"priority\" AS int8) AS \"priority\" \
             FROM \"tasks\" WHERE (\"org_id\", \"task_id\") > ($1, $2) \
             ORDER BY \"org_id\", \"task_id\" LIMIT {PAGE_ROWS}"
        )
    );
}

#[test]
fn inserts_bind_every_value_and_stay_within_the_limits() {
    let cols = names(&["a", "b"]);
    assert_eq!(
        insert_statement("t", &cols, 2, false),
        "INSERT INTO \"t\" (\"a\", \"b\") VALUES (?, ?), (?, ?)"
    );
    assert_eq!(
        insert_statement("t", &cols, 2, true),
        "INSERT INTO \"t\" (\"a\", \"b\") OVERRIDING SYSTEM VALUE VALUES ($1, $2), ($3, $4)"
    );
    assert_eq!(
        insert_statement("t", &cols, 1, true),
        "INSERT INTO \"t\" (\"a\", \"b\") OVERRIDING SYSTEM VALUE VALUES ($1, $2)"
    );
    assert_eq!(rows_per_insert(2), PAGE_ROWS);
    assert_eq!(rows_per_insert(100), 300);
    assert_eq!(rows_per_insert(100_000), 1);
    assert_eq!(quoted("we\"ird"), "\"we\"\"ird\"");
}

#[test]
fn counts_that_differ_are_named() {
    let counts = vec![
        TableCount {
            table: "orgs".into(),
            source: 2,
            destination: 2,
        },
        TableCount {
            table: "tasks".into(),
            source: 10,
            destination: 9,
        },
    ];
    assert_eq!(
        count_mismatches(&counts),
        ["tasks: 10 rows in the source, 9 in the destination"]
    );
    assert!(count_mismatches(&counts[..1]).is_empty());
}

#[test]
fn every_sequence_numbers_a_known_column() {
    let owned = vec![(
        "strikes_strike_id_seq".to_string(),
        "strikes".to_string(),
        "strike_id".to_string(),
    )];
    let found =
        sequence_columns(&names(&["strikes_strike_id_seq", "task_event_ids"]), &owned).unwrap();
    assert_eq!(
        found[1],
        (
            "task_event_ids".into(),
            "task_events".into(),
            "event_id".into()
        )
    );
    let error = sequence_columns(&names(&["new_ids"]), &owned).unwrap_err();
    assert!(error.contains("new_ids"), "{error}");
}

#[test]
fn ids_continue_above_the_highest_given() {
    assert_eq!(last_id(Some(10), None), 10);
    assert_eq!(last_id(Some(10), Some(25)), 25);
    assert_eq!(last_id(Some(30), Some(25)), 30);
    assert_eq!(last_id(None, None), 0);
}

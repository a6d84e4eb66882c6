//! The Feature Store REST API through `tern up`: the metadata script
//! (`crates/rest/feature_store_metadata.sql`) and a fixture in the shapes of RonDB's own REST test
//! metadata (`tests/fixtures/feature_store.sql`) loaded with the `mariadb` client, then
//! `/0.1.0/feature_store` and `/0.1.0/batch_feature_store` over HTTP: single and joined feature
//! groups, prefixes and join columns, labels, a composite key, missing rows and keys, passed
//! features with and without validation, metadata and detailed status, and rdrs2's errors.

use serde_json::{Value as Json, json};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::free_port;

fn post(port: u16, path: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = Vec::new();
    s.read_to_end(&mut r).unwrap();
    let r = String::from_utf8(r).unwrap();
    let status: u16 = r[9..12].parse().unwrap();
    (status, r.split_once("\r\n\r\n").unwrap().1.to_string())
}

fn load(mysql: u16, file: &str) {
    let sql = std::fs::read(file).unwrap();
    let mut child = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-P", &mysql.to_string(), "-u", "root", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mariadb client (.ci/run installs it)");
    child.stdin.take().unwrap().write_all(&sql).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn feature_vectors_as_rdrs2_serves_them() {
    let dir = tempfile::tempdir().unwrap();
    let (mysql, rest) = (free_port(), free_port());
    let (_up, line) = common::up_single(dir.path(), mysql, rest, "256M");
    assert!(line.contains(&format!("rest=127.0.0.1:{rest}")), "ready line: {line}");
    let root = env!("CARGO_MANIFEST_DIR");
    load(mysql, &format!("{root}/../rest/feature_store_metadata.sql"));
    load(mysql, &format!("{root}/tests/fixtures/feature_store.sql"));

    let one = |view: &str, rest_of: &str| {
        let (status, body) = post(
            rest,
            "/0.1.0/feature_store",
            &format!(
                r#"{{"featureStoreName": "fsdb001", "featureViewName": "{view}", "featureViewVersion": 1, {rest_of}}}"#
            ),
        );
        let v: Json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        (status, v)
    };
    let ok = |view: &str, rest_of: &str| {
        let (status, v) = one(view, rest_of);
        assert_eq!(status, 200, "{v}");
        v
    };
    let detailed = |statuses: &[(i64, u16)]| {
        Json::Array(statuses.iter().map(|(g, s)| json!({"featureGroupId": g, "httpStatus": s})).collect())
    };

    // One feature group: values as the REST API prints them, NULL as null, metadata on request.
    let v = ok(
        "sample_1",
        r#""entries": {"id1": 73}, "metadataOptions": {"featureName": true, "featureType": true}, "options": {"includeDetailedStatus": true}"#,
    );
    assert_eq!(v["features"], json!([73, "2022-01-16 00:00:00", 17, 28]));
    assert_eq!(
        v["metadata"],
        json!([
            {"featureName": "id1", "featureType": "bigint"}, {"featureName": "ts", "featureType": "timestamp"},
            {"featureName": "data1", "featureType": "bigint"}, {"featureName": "data2", "featureType": "bigint"}
        ])
    );
    assert_eq!(v["status"], "COMPLETE");
    assert_eq!(v["detailedStatus"], detailed(&[(2069, 200)]));
    let v = ok("sample_1", r#""entries": {"id1": 12}"#);
    assert_eq!(
        v,
        json!({"features": [12, null, 61, null], "metadata": null, "status": "COMPLETE", "detailedStatus": null})
    );
    // No row: the key is echoed, the rest null, MISSING (404 in the detailed status).
    let v = ok("sample_1", r#""entries": {"id1": 99}, "options": {"includeDetailedStatus": true}"#);
    assert_eq!((&v["features"], &v["status"]), (&json!([99, null, null, null]), &json!("MISSING")));
    assert_eq!(v["detailedStatus"], detailed(&[(2069, 404)]));
    // A key given as a string is converted to the column's type.
    assert_eq!(ok("sample_1", r#""entries": {"id1": "56"}"#)["features"], json!(["56", "2022-01-17 10:20:30", 12, 67]));

    // Two groups joined: the right one's key comes from its join column, its features prefixed.
    let v = ok("sample_1n2", r#""entries": {"id1": 73}, "metadataOptions": {"featureName": true}"#);
    assert_eq!(v["features"], json!([73, "2022-01-16 00:00:00", 17, 28, 73, "2022-01-09", "int1", "str19"]));
    let names: Vec<&str> =
        v["metadata"].as_array().unwrap().iter().map(|m| m["featureName"].as_str().unwrap()).collect();
    assert_eq!(names, ["id1", "ts", "data1", "data2", "fg2_id1", "fg2_ts", "fg2_data1", "fg2_data2"]);
    assert!(v["metadata"][0]["featureType"].is_null());
    let v = ok("sample_1n2", r#""entries": {"id1": 56}, "options": {"includeDetailedStatus": true}"#);
    assert_eq!(v["features"], json!([56, "2022-01-17 10:20:30", 12, 67, 56, null, null, null]));
    assert_eq!((&v["status"], &v["detailedStatus"]), (&json!("MISSING"), &detailed(&[(2069, 200), (2071, 404)])));
    // The join column wins over the prefixed key (rdrs2's required entry first).
    assert_eq!(ok("sample_1n2", r#""entries": {"id1": 12, "fg2_id1": 73}"#)["features"][6], "int24");
    // Passed features replace stored values; validated by type unless switched off.
    let v = ok("sample_1n2", r#""entries": {"id1": 12}, "passedFeatures": {"data2": 5, "fg2_data2": "p"}"#);
    assert_eq!(v["features"], json!([12, null, 61, 5, 12, "2022-01-24", "int24", "p"]));
    let (status, e) = one("sample_1n2", r#""entries": {"id1": 12}, "passedFeatures": {"data2": "x"}"#);
    assert_eq!(status, 400);
    assert_eq!(
        e,
        json!({"code": 10, "reason": "Wrong data type.", "message": "Got: 'STRING', expected: 'NUMBER' (offline type: bigint)"})
    );
    let v = ok(
        "sample_1n2",
        r#""entries": {"id1": 12}, "passedFeatures": {"data2": "x"}, "options": {"validatePassedFeatures": false}"#,
    );
    assert_eq!(v["features"][3], "x");

    // A label is not served and cannot be passed.
    let v = ok("sample_1n2_label", r#""entries": {"id1": 73}, "metadataOptions": {"featureName": true}"#);
    assert_eq!(v["features"], json!([73, 28, "int1"]));
    assert_eq!(v["metadata"][2]["featureName"], "fg2_data1");
    let (status, e) = one("sample_1n2_label", r#""entries": {"id1": 73}, "passedFeatures": {"data1": 1}"#);
    assert_eq!((status, e["code"].as_i64()), (400, Some(11)));

    // A composite key; a key missing from the entry makes that group MISSING (400).
    assert_eq!(ok("sample_3", r#""entries": {"id1": 1, "id2": "b"}"#)["features"], json!([1, "b", 2.25]));
    let v = ok("sample_3", r#""entries": {"id1": 1}, "options": {"includeDetailedStatus": true}"#);
    assert_eq!((&v["features"], &v["status"]), (&json!([1, null, null]), &json!("MISSING")));
    assert_eq!(v["detailedStatus"], detailed(&[(2076, 400)]));

    // Errors of the whole request.
    let err = |view: &str, rest_of: &str| {
        let (status, e) = one(view, rest_of);
        assert_eq!(status, 400, "{e}");
        (
            e["code"].as_i64().unwrap(),
            e["reason"].as_str().unwrap().to_string(),
            e["message"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(err("nope", r#""entries": {"id1": 1}"#), (1, "Feature view does not exist.".into(), String::new()));
    assert_eq!(
        err("test_deleted_fg", r#""entries": {"id1": 1}"#),
        (
            3,
            "Feature group does not exist.".into(),
            "Cannot get the feature group of feature `id1`. Check if the feature group still exists.".into()
        )
    );
    assert_eq!(
        err("sample_1", r#""entries": {"data1": 1}"#),
        (
            12,
            "Incorrect primary key.".into(),
            "Provided primary key `data1` does not belong to the set of primary keys.".into()
        )
    );
    assert_eq!(err("sample_1", r#""entries": {}"#).2, "No entries found");
    let (status, body) = post(
        rest,
        "/0.1.0/feature_store",
        r#"{"featureStoreName": "nope", "featureViewName": "sample_1", "featureViewVersion": 1, "entries": {"id1": 1}}"#,
    );
    assert_eq!((status, serde_json::from_str::<Json>(&body).unwrap()["code"].as_i64()), (400, Some(2)));
    let (status, body) =
        post(rest, "/0.1.0/feature_store", r#"{"featureViewName": "sample_1", "featureViewVersion": 1}"#);
    assert_eq!((status, body.as_str()), (400, "Error:Field validation for 'Body' failed featureStoreName"));

    // Batch: answers in request order; a bad entry is an ERROR row, not a failed request.
    let (status, body) = post(
        rest,
        "/0.1.0/batch_feature_store",
        r#"{"featureStoreName": "fsdb001", "featureViewName": "sample_1", "featureViewVersion": 1,
            "entries": [{"id1": 73}, {"id1": 99}, {"bad": 1}, {"id1": 12}],
            "passedFeatures": [null, {"data1": 7}, null, {}], "options": {"includeDetailedStatus": true}}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Json>(&body).unwrap(),
        json!({
            "features": [[73, "2022-01-16 00:00:00", 17, 28], [99, null, 7, null], null, [12, null, 61, null]],
            "metadata": null,
            "status": ["COMPLETE", "MISSING", "ERROR", "COMPLETE"],
            "detailedStatus": [detailed(&[(2069, 200)]), detailed(&[(2069, 404)]), null, detailed(&[(2069, 200)])]
        })
    );
    let batch = |extra: &str| {
        post(
            rest,
            "/0.1.0/batch_feature_store",
            &format!(
                r#"{{"featureStoreName": "fsdb001", "featureViewName": "sample_1", "featureViewVersion": 1, {extra}}}"#
            ),
        )
    };
    assert_eq!(batch(r#""entries": []"#), (400, "No primary key is given.".into()));
    assert_eq!(
        batch(r#""entries": [{"id1": 1}], "passedFeatures": [null, null]"#),
        (400, "Length of passed feature does not equal to that of the entries provided in the request.".into())
    );
}

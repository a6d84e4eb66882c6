//! Model-based randomized test of a partition against a BTreeMap reference, including an ordered
//! and a unique index. Prints the seed; rerun with TERN_SEED=<seed> to reproduce.

use std::collections::BTreeMap;
use std::sync::Arc;
use tern_store::{IndexBound, Partition};
use tern_types::rng::Rng;
use tern_types::row::encode_index_value;
use tern_types::schema::{Column, ColumnType as T, Index, Table};
use tern_types::{ErrorCode, RowLayout, Value};

fn table_with(u: T, pad: T) -> Table {
    Table {
        id: 1,
        database: "d".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id", T::Int { unsigned: false }).not_null(),
            Column::new("k", T::Int { unsigned: false }).not_null(),
            Column::new("u", u),
            Column::new("pad", pad),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![
            Index { id: 1, name: "k_1".into(), columns: vec![1], unique: false },
            Index { id: 2, name: "u_1".into(), columns: vec![2], unique: true },
        ],
        partition_count: 1,
        groups: 0,
        ttl: None,
        comment: String::new(),
    }
}

#[test]
fn partition_matches_reference_model_variable_rows() {
    model_run(table_with(T::VarChar { len: 8 }, T::VarBinary { len: 40 }), true);
}

#[test]
fn partition_matches_reference_model_fixed_rows() {
    let t = table_with(T::BigInt { unsigned: false }, T::Binary { len: 40 });
    assert!(RowLayout::new(&t).fixed_row_len().is_some(), "this table uses the paged fixed-size heap");
    model_run(t, false);
}

fn model_run(t: Table, text: bool) {
    let seed = tern_testkit::seed();
    println!("seed = {seed} (rerun with TERN_SEED={seed})");
    let mut rng = Rng::new(seed);
    let layout = Arc::new(RowLayout::new(&t));
    let mut p = Partition::new(&t, 0, layout.clone());
    let mut model: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
    for step in 0..30_000 {
        let id = rng.below(3000) as i64;
        let u = if rng.chance(30) {
            Value::Null
        } else if text {
            Value::str(&format!("u{}", rng.below(400)))
        } else {
            Value::Int(rng.below(400) as i64)
        };
        let pad = if text { Value::Bytes(vec![7; rng.below(40) as usize]) } else { Value::Bytes(vec![7; 40]) };
        let vals = vec![Value::Int(id), Value::Int(rng.below(20) as i64), u.clone(), pad];
        let mut row = Vec::new();
        layout.encode_row(&vals, &mut row).unwrap();
        let mut key = Vec::new();
        layout.encode_key(&[Value::Int(id)], &mut key).unwrap();
        let unique_taken = |m: &BTreeMap<i64, Vec<Value>>, except: i64| {
            !u.is_null() && m.iter().any(|(k, v)| *k != except && v[2] == u)
        };
        match rng.below(4) {
            0 => {
                let expect_dup = model.contains_key(&id);
                let conflict = p.unique_conflict(&row, None).unwrap().is_some();
                assert_eq!(conflict, unique_taken(&model, i64::MIN), "step {step}: unique check");
                if conflict {
                    continue;
                }
                match p.insert(&row) {
                    Ok(_) => {
                        assert!(!expect_dup, "step {step}");
                        model.insert(id, vals);
                    }
                    Err(e) => {
                        assert!(expect_dup, "step {step}");
                        assert_eq!(e.code, ErrorCode::DuplicateKey);
                    }
                }
            }
            1 => match p.lookup(&key) {
                Some(rid) => {
                    if p.unique_conflict(&row, Some(rid)).unwrap().is_some() {
                        assert!(unique_taken(&model, id), "step {step}");
                        continue;
                    }
                    p.update(rid, &row).unwrap();
                    model.insert(id, vals);
                }
                None => assert!(!model.contains_key(&id), "step {step}"),
            },
            2 => match p.lookup(&key) {
                Some(rid) => {
                    p.delete(rid).unwrap();
                    assert!(model.remove(&id).is_some(), "step {step}");
                }
                None => assert!(!model.contains_key(&id), "step {step}"),
            },
            _ => {
                let got = p.lookup(&key).map(|rid| layout.decode_row(p.row(rid)).unwrap());
                assert_eq!(got.as_ref(), model.get(&id), "step {step}: read");
            }
        }
        if step % 2000 == 0 {
            p.check();
        }
    }
    p.check();
    // Full scan returns exactly the model.
    let mut seen = BTreeMap::new();
    let mut from = Some(0);
    while let Some(f) = from {
        let mut n = 0;
        from = p.scan(f, |_, row| {
            let v = layout.decode_row(row).unwrap();
            seen.insert(v[0].as_i128().unwrap() as i64, v);
            n += 1;
            n < 17
        });
    }
    assert_eq!(seen, model);
    // Ordered index range k in [5, 9] in batches, ascending, matches the model in (k, id) order.
    let bound = |k: i64| {
        let mut b = Vec::new();
        encode_index_value(T::Int { unsigned: false }, false, &Value::Int(k), &mut b).unwrap();
        b
    };
    let lo = IndexBound { key: bound(5), inclusive: true };
    let hi = IndexBound { key: bound(9), inclusive: true };
    let mut got = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let mut n = 0;
        let next = p.index_scan(0, Some(&lo), Some(&hi), after.as_deref(), false, 0, |_, _, row| {
            let v = layout.decode_row(row).unwrap();
            got.push((v[1].as_i128().unwrap() as i64, v[0].as_i128().unwrap() as i64));
            n += 1;
            n < 5
        });
        match next {
            Some(k) => after = Some(k),
            None => break,
        }
    }
    let mut want: Vec<(i64, i64)> = model
        .values()
        .map(|v| (v[1].as_i128().unwrap() as i64, v[0].as_i128().unwrap() as i64))
        .filter(|(k, _)| (5..=9).contains(k))
        .collect();
    want.sort();
    assert_eq!(got, want);
    // Exclusive bounds, descending.
    let lo = IndexBound { key: bound(5), inclusive: false };
    let hi = IndexBound { key: bound(9), inclusive: false };
    let mut got = Vec::new();
    p.index_scan(0, Some(&lo), Some(&hi), None, true, 0, |_, _, row| {
        let v = layout.decode_row(row).unwrap();
        got.push((v[1].as_i128().unwrap() as i64, v[0].as_i128().unwrap() as i64));
        true
    });
    let mut want: Vec<(i64, i64)> = model
        .values()
        .map(|v| (v[1].as_i128().unwrap() as i64, v[0].as_i128().unwrap() as i64))
        .filter(|(k, _)| (6..=8).contains(k))
        .collect();
    want.sort();
    want.reverse();
    assert_eq!(got, want);
    // Every kind of bound, both directions, resumed in batches after skipping by rank: the
    // model's entries of the range in reading order, less the skipped; the count is the range's.
    let mut all: Vec<(i64, i64)> =
        model.values().map(|v| (v[1].as_i128().unwrap() as i64, v[0].as_i128().unwrap() as i64)).collect();
    all.sort();
    let kinds = [None, Some(true), Some(false)];
    for lo_kind in kinds {
        for hi_kind in kinds {
            for (lk, hk) in [(3i64, 12i64), (0, 0), (7, 7), (9, 4), (-5, 100)] {
                let lo = lo_kind.map(|inclusive| IndexBound { key: bound(lk), inclusive });
                let hi = hi_kind.map(|inclusive| IndexBound { key: bound(hk), inclusive });
                let inside = |k: i64| {
                    lo_kind.is_none_or(|inc| if inc { k >= lk } else { k > lk })
                        && hi_kind.is_none_or(|inc| if inc { k <= hk } else { k < hk })
                };
                let range: Vec<(i64, i64)> = all.iter().copied().filter(|e| inside(e.0)).collect();
                assert_eq!(
                    p.index_count(0, lo.as_ref(), hi.as_ref()),
                    range.len() as u64,
                    "{lo_kind:?} {lk} {hi_kind:?} {hk}"
                );
                for descending in [false, true] {
                    for skip in [0u64, 1, 3, 40, 1 << 40] {
                        let mut want = range.clone();
                        if descending {
                            want.reverse();
                        }
                        let want: Vec<_> = want.into_iter().skip(skip.min(1 << 20) as usize).collect();
                        let mut got = Vec::new();
                        let mut after: Option<Vec<u8>> = None;
                        loop {
                            let mut n = 0;
                            let s = if after.is_none() { skip } else { 0 };
                            let next = p.index_scan(
                                0,
                                lo.as_ref(),
                                hi.as_ref(),
                                after.as_deref(),
                                descending,
                                s,
                                |_, _, row| {
                                    let v = layout.decode_row(row).unwrap();
                                    got.push((v[1].as_i128().unwrap() as i64, v[0].as_i128().unwrap() as i64));
                                    n += 1;
                                    n < 7
                                },
                            );
                            match next {
                                Some(k) => after = Some(k),
                                None => break,
                            }
                        }
                        assert_eq!(got, want, "{lo_kind:?} {lk} {hi_kind:?} {hk} desc {descending} skip {skip}");
                    }
                }
            }
        }
    }
    // Charges: equal to the sum of the charges of the rows in the model.
    let total: u64 = model
        .values()
        .map(|v| {
            let mut row = Vec::new();
            layout.encode_row(v, &mut row).unwrap();
            p.charge(&row)
        })
        .sum();
    assert_eq!(p.charged(), total);
}

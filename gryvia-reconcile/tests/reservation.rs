//! Reservation windows (immediate, recurring, across midnight, in time zones) and the nodes a
//! reservation holds.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use gryvia_reconcile::reservation::{
    CandidateNode, ReservationReconciler, ReservationWorld, Window, choose_nodes, window,
};
use gryvia_reconcile::{NodeOp, Reconcile};
use gryvia_types::{GryviaReservation, ReservationPhase};
use serde_json::{Value, json};

fn t(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

fn reservation(schedule: Value) -> GryviaReservation {
    serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation",
        "metadata": {"name": "r1", "generation": 1, "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"owner": {"type": "team", "name": "ml"},
                 "resources": {"gpuType": "H100", "gpuCount": 16},
                 "schedule": schedule}
    }))
    .unwrap()
}

fn nightly(tz: &str) -> GryviaReservation {
    reservation(json!({"type": "recurring", "recurrence": {
        "daysOfWeek": ["Mon", "Tue", "Wed", "Thu", "Fri"], "startTime": "22:00", "durationMinutes": 480, "timeZone": tz}}))
}

#[test]
fn an_immediate_reservation_is_open_until_its_end_then_over() {
    let r = reservation(json!({"type": "immediate", "endTime": "2026-12-02T18:00:00Z"}));
    assert_eq!(
        window(&r, t("2026-12-02T12:00:00Z")).unwrap(),
        Window::Open {
            start: t("2026-12-01T00:00:00Z"),
            end: t("2026-12-02T18:00:00Z")
        }
    );
    assert_eq!(window(&r, t("2026-12-02T18:00:00Z")).unwrap(), Window::Over);
    let later = reservation(
        json!({"type": "immediate", "startTime": "2026-12-03T08:00:00Z", "endTime": "2026-12-03T18:00:00Z"}),
    );
    assert!(matches!(
        window(&later, t("2026-12-02T12:00:00Z")).unwrap(),
        Window::Next { .. }
    ));
}

#[test]
fn a_recurring_window_crosses_midnight() {
    let r = nightly("UTC");
    // Wednesday 2026-12-02 23:30: opened 22:00, closes Thursday 06:00.
    assert_eq!(
        window(&r, t("2026-12-02T23:30:00Z")).unwrap(),
        Window::Open {
            start: t("2026-12-02T22:00:00Z"),
            end: t("2026-12-03T06:00:00Z")
        }
    );
    // Thursday 03:00 is still Wednesday's window.
    assert_eq!(
        window(&r, t("2026-12-03T03:00:00Z")).unwrap(),
        Window::Open {
            start: t("2026-12-02T22:00:00Z"),
            end: t("2026-12-03T06:00:00Z")
        }
    );
    // Thursday noon: the next window opens Thursday 22:00.
    assert_eq!(
        window(&r, t("2026-12-03T12:00:00Z")).unwrap(),
        Window::Next {
            start: t("2026-12-03T22:00:00Z"),
            end: t("2026-12-04T06:00:00Z")
        }
    );
    // Saturday 2026-12-05 03:00: Friday night's window is open; Saturday's does not exist.
    assert!(matches!(
        window(&r, t("2026-12-05T03:00:00Z")).unwrap(),
        Window::Open { .. }
    ));
    assert_eq!(
        window(&r, t("2026-12-05T12:00:00Z")).unwrap(),
        Window::Next {
            start: t("2026-12-07T22:00:00Z"),
            end: t("2026-12-08T06:00:00Z")
        },
        "next is Monday night"
    );
}

#[test]
fn a_recurring_window_follows_its_time_zone_and_daylight_saving() {
    let r = nightly("America/New_York");
    // 22:00 in New York in December is 03:00 UTC the next day (EST, UTC-5).
    assert_eq!(
        window(&r, t("2026-12-03T04:00:00Z")).unwrap(),
        Window::Open {
            start: t("2026-12-03T03:00:00Z"),
            end: t("2026-12-03T11:00:00Z")
        }
    );
    // In July (EDT, UTC-4) the same local time is 02:00 UTC.
    assert_eq!(
        window(&r, t("2026-07-08T04:00:00Z")).unwrap(),
        Window::Open {
            start: t("2026-07-08T02:00:00Z"),
            end: t("2026-07-08T10:00:00Z")
        }
    );
}

#[test]
fn bounds_clip_recurring_windows_and_end_them() {
    let mut r = nightly("UTC");
    r.spec.schedule.end_time = Some("2026-12-03T02:00:00Z".into());
    assert_eq!(
        window(&r, t("2026-12-02T23:00:00Z")).unwrap(),
        Window::Open {
            start: t("2026-12-02T22:00:00Z"),
            end: t("2026-12-03T02:00:00Z")
        }
    );
    assert_eq!(window(&r, t("2026-12-03T02:00:00Z")).unwrap(), Window::Over);
    let mut later = nightly("UTC");
    later.spec.schedule.start_time = Some("2026-12-10T00:00:00Z".into());
    // Wednesday night's window (12-09 22:00 to 12-10 06:00) is clipped to the bound.
    assert_eq!(
        window(&later, t("2026-12-02T23:00:00Z")).unwrap(),
        Window::Next {
            start: t("2026-12-10T00:00:00Z"),
            end: t("2026-12-10T06:00:00Z")
        }
    );
}

#[test]
fn an_unknown_time_zone_is_an_invalid_spec_naming_the_field() {
    let r = nightly("Mars/Olympus");
    let e = window(&r, t("2026-12-02T23:00:00Z"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("spec.schedule.recurrence.timeZone"), "{e}");
    let plan = ReservationReconciler.reconcile(
        &r,
        &ReservationWorld::default(),
        t("2026-12-02T23:00:00Z"),
    );
    let c = &plan.status.unwrap().conditions[0];
    assert_eq!(c.reason, "InvalidSpec");
}

fn node(name: &str, gpus: i32, in_use: i32) -> CandidateNode {
    CandidateNode {
        name: name.into(),
        product: Some("H100".into()),
        gpus,
        gpus_in_use: in_use,
        ..Default::default()
    }
}

#[test]
fn whole_idle_nodes_of_the_product_are_chosen_until_the_count_is_covered() {
    let mut other = node("d", 8, 0);
    other.reserved_by = Some("someone-else".into());
    let mut a100 = node("e", 8, 0);
    a100.product = Some("A100".into());
    let mut cordoned = node("f", 8, 0);
    cordoned.unschedulable = true;
    let w = ReservationWorld {
        nodes: vec![
            node("a", 8, 4),
            node("b", 8, 0),
            node("c", 8, 1),
            other,
            a100,
            cordoned,
        ],
        ..ReservationWorld::default()
    };
    assert_eq!(choose_nodes("r1", "H100", 16, &w), vec!["b", "c"]);
    assert_eq!(choose_nodes("r1", "H100", 9, &w), vec!["b", "c"]);
    assert_eq!(choose_nodes("r1", "H100", 8, &w), vec!["b"]);
}

#[test]
fn a_held_node_is_kept_even_when_busier_ones_are_free() {
    let mut held = node("z", 8, 8);
    held.reserved_by = Some("r1".into());
    let w = ReservationWorld {
        nodes: vec![node("a", 8, 0), held],
        ..ReservationWorld::default()
    };
    assert_eq!(choose_nodes("r1", "H100", 8, &w), vec!["z"]);
}

#[test]
fn an_open_window_labels_and_taints_the_nodes_and_a_closed_one_releases_them() {
    let r = reservation(json!({"type": "immediate", "endTime": "2026-12-02T18:00:00Z"}));
    let w = ReservationWorld {
        nodes: vec![node("a", 8, 0), node("b", 8, 0), node("c", 8, 0)],
        ..ReservationWorld::default()
    };
    let plan = ReservationReconciler.reconcile(&r, &w, t("2026-12-02T12:00:00Z"));
    let s = plan.status.clone().unwrap();
    assert_eq!(s.phase, Some(ReservationPhase::Active));
    assert_eq!(s.reserved_nodes, vec!["a", "b"]);
    assert_eq!(s.reserved_gpus, 16);
    assert_eq!(plan.node_ops.len(), 4);
    assert!(
        matches!(&plan.node_ops[0], NodeOp::Label { node, key, value } if node == "a" && key == "gryvia.io/reserved" && value == "r1")
    );
    assert!(
        matches!(&plan.node_ops[1], NodeOp::Taint { node, taint } if node == "a" && taint.value == "r1")
    );
    // Requeued for the idle sample (30 s), which is before the window's end.
    assert_eq!(plan.requeue_after_ms, Some(30_000));

    // Applied: the nodes carry the label; after the end they are released.
    let mut r = r;
    r.status = Some(s);
    let held = ReservationWorld {
        nodes: w
            .nodes
            .iter()
            .cloned()
            .map(|mut n| {
                if n.name != "c" {
                    n.reserved_by = Some("r1".into());
                    n.tainted_by = Some("r1".into());
                }
                n
            })
            .collect(),
        ..ReservationWorld::default()
    };
    let again = ReservationReconciler.reconcile(&r, &held, t("2026-12-02T12:00:30Z"));
    assert!(again.node_ops.is_empty(), "nothing to change while open");
    let s = again.status.unwrap();
    assert_eq!(s.idle_gpu_seconds, 16 * 30, "16 idle GPUs for 30 s");
    r.status = Some(s);
    let closed = ReservationReconciler.reconcile(&r, &held, t("2026-12-02T18:00:00Z"));
    let s = closed.status.unwrap();
    assert_eq!(s.phase, Some(ReservationPhase::Expired));
    assert!(s.reserved_nodes.is_empty());
    let removed: Vec<&str> = closed
        .node_ops
        .iter()
        .filter_map(|op| match op {
            NodeOp::RemoveTaint { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(removed, vec!["a", "b"]);
    assert!(closed.events.iter().any(|e| e.reason == "Expired"));
}

#[test]
fn too_few_free_nodes_make_a_partial_reservation_with_a_warning() {
    let r = reservation(json!({"type": "immediate", "endTime": "2026-12-02T18:00:00Z"}));
    let w = ReservationWorld {
        nodes: vec![node("a", 8, 0)],
        ..ReservationWorld::default()
    };
    let plan = ReservationReconciler.reconcile(&r, &w, t("2026-12-02T12:00:00Z"));
    let s = plan.status.unwrap();
    assert_eq!(s.phase, Some(ReservationPhase::Partial));
    assert!(s.message.unwrap().contains("holding 8 of 16"));
    assert!(plan.events.iter().any(|e| e.reason == "Partial"));
}

#[test]
fn deleting_a_reservation_releases_every_node_it_holds() {
    let r = reservation(json!({"type": "immediate", "endTime": "2026-12-02T18:00:00Z"}));
    let mut a = node("a", 8, 0);
    a.reserved_by = Some("r1".into());
    let mut b = node("b", 8, 0);
    b.reserved_by = Some("other".into());
    let plan = ReservationReconciler.cleanup(
        &r,
        &ReservationWorld {
            nodes: vec![a, b],
            ..ReservationWorld::default()
        },
        t("2026-12-02T12:00:00Z"),
    );
    assert_eq!(plan.node_ops.len(), 2);
    assert!(plan.node_ops.iter().all(|op| op.node() == "a"));
}

#[test]
fn a_pending_window_holds_nothing_and_wakes_up_when_it_opens() {
    let r = nightly("UTC");
    let w = ReservationWorld {
        nodes: vec![node("a", 8, 0), node("b", 8, 0)],
        ..ReservationWorld::default()
    };
    let plan = ReservationReconciler.reconcile(&r, &w, t("2026-12-02T21:00:00Z"));
    let s = plan.status.unwrap();
    assert_eq!(s.phase, Some(ReservationPhase::Pending));
    assert!(plan.node_ops.is_empty());
    assert_eq!(plan.requeue_after_ms, Some(3_600_000));
}

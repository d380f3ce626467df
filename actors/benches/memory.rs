//! Memory an org actor holds per pending task: its `OpenTasks` (headers, the
//! claim-order and per-tag indexes), measured with a counting allocator for
//! 100,000 pending tasks carrying realistic tags and a blocker link.
//!
//! Run with `cargo bench -p taskq-actors --bench memory`. Prints bytes per
//! task and fails if it reaches 1 KiB.

use std::alloc::System;

use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use taskq_actors::domain::open::OpenTasks;
use taskq_actors::domain::{TaskHeader, TaskId, TaskStatus};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const TASKS: usize = 100_000;
const TAGS: [&str; 6] = ["backend", "frontend", "gpu", "review", "urgent", "docs"];

fn main() {
    let region = Region::new(GLOBAL);
    let mut open = OpenTasks::default();
    let mut previous = None;
    for i in 0..TASKS {
        let header = TaskHeader {
            task_id: TaskId::new_v7(),
            status: TaskStatus::Pending,
            priority: (i % 5) as u8 + 1,
            created_at: 1_800_000_000_000 + i as i64,
            updated_at: 1_800_000_000_000 + i as i64,
            assignee: Some(format!("agent-{}@fleet.example", i % 64)),
            tags: vec![
                TAGS[i % TAGS.len()].to_owned(),
                TAGS[(i / 7) % TAGS.len()].to_owned(),
            ],
            blocked_by: previous.into_iter().collect(),
            parent: previous,
            lease: None,
            attempts: 0,
            max_attempts: 5,
            run_at: None,
            retry: None,
            retries: 0,
            scheduled: None,
        };
        previous = Some(header.task_id);
        open.put(header);
    }
    let stats = region.change();
    let bytes =
        stats.bytes_allocated as isize - stats.bytes_deallocated as isize + stats.bytes_reallocated;
    let per_task = bytes as f64 / TASKS as f64;
    println!(
        "open-task index: {TASKS} pending tasks, {:.1} MiB, {per_task:.0} bytes per task",
        bytes as f64 / (1024.0 * 1024.0)
    );
    assert_eq!(open.pending_len(), TASKS);
    assert!(
        per_task < 1024.0,
        "{per_task:.0} bytes per pending task is over 1 KiB"
    );
}

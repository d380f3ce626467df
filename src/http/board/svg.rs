//! Geometry of the board's pictures: the dependency graph of a task and
//! the bar charts of the reports. Only numbers and already-escaped text
//! leave here; the templates draw them as SVG (no script, no external
//! reference, links only to the board's own task pages).

use taskq_actors::domain::TaskStatus;

/// A node of the dependency graph.
pub struct Node {
    pub id: String,
    /// The title, shortened to fit its box.
    pub label: String,
    pub title: String,
    pub status: TaskStatus,
    pub x: u32,
    pub y: u32,
    /// The task whose page this is.
    pub current: bool,
}

/// An arrow from a blocker to the task it blocks.
pub struct Edge {
    pub x1: u32,
    pub y1: u32,
    pub x2: u32,
    pub y2: u32,
}

/// A task's blockers (left), the task (middle) and its dependents (right).
pub struct Graph {
    pub width: u32,
    pub height: u32,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

pub const NODE_W: u32 = 210;
pub const NODE_H: u32 = 46;
const GAP_X: u32 = 70;
const GAP_Y: u32 = 16;
const LABEL_CHARS: usize = 26;

/// A task of the graph: id, title, status.
pub type GraphTask = (String, String, TaskStatus);

/// The first `max` characters of `s`, with an ellipsis when cut.
pub fn shorten(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

impl Graph {
    pub fn new(task: GraphTask, blockers: Vec<GraphTask>, dependents: Vec<GraphTask>) -> Graph {
        let rows = blockers.len().max(dependents.len()).max(1) as u32;
        let height = rows * (NODE_H + GAP_Y) + GAP_Y;
        let column_x = |c: u32| GAP_Y + c * (NODE_W + GAP_X);
        let column = |tasks: Vec<GraphTask>, c: u32, nodes: &mut Vec<Node>| {
            let n = tasks.len() as u32;
            let top = (height - n * (NODE_H + GAP_Y) + GAP_Y) / 2;
            for (i, (id, title, status)) in tasks.into_iter().enumerate() {
                nodes.push(Node {
                    label: shorten(&title, LABEL_CHARS),
                    id,
                    title,
                    status,
                    x: column_x(c),
                    y: top + i as u32 * (NODE_H + GAP_Y),
                    current: false,
                });
            }
        };
        let mut nodes = Vec::new();
        column(blockers, 0, &mut nodes);
        let blockers_end = nodes.len();
        column(vec![task], 1, &mut nodes);
        nodes[blockers_end].current = true;
        column(dependents, 2, &mut nodes);
        let centre = &nodes[blockers_end];
        let (cx, cy) = (centre.x, centre.y + NODE_H / 2);
        let mut edges = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            if i < blockers_end {
                edges.push(Edge {
                    x1: node.x + NODE_W,
                    y1: node.y + NODE_H / 2,
                    x2: cx - 4,
                    y2: cy,
                });
            } else if i > blockers_end {
                edges.push(Edge {
                    x1: cx + NODE_W,
                    y1: cy,
                    x2: node.x - 4,
                    y2: node.y + NODE_H / 2,
                });
            }
        }
        Graph {
            width: column_x(3) - GAP_X + GAP_Y,
            height,
            nodes,
            edges,
        }
    }
}

/// A bar of a chart, with its label below and its value above.
pub struct Bar {
    pub x: u32,
    pub y: u32,
    pub w: u32,
    pub h: u32,
    pub label: String,
    pub value: String,
    /// Where the label's and the value's text is centred.
    pub cx: u32,
}

/// A bar chart: one bar per (label, value), scaled to the largest; a
/// chart without a bar says so instead of drawing an empty frame.
pub struct BarChart {
    pub title: String,
    /// What the chart says when it has no bar.
    pub empty: &'static str,
    pub width: u32,
    pub height: u32,
    /// The baseline's height from the top.
    pub base: u32,
    pub bars: Vec<Bar>,
}

const CHART_H: u32 = 150;
const BAR_W: u32 = 64;
const BAR_GAP: u32 = 20;

impl BarChart {
    /// `shown` formats a value for its label.
    pub fn new(title: &str, data: &[(String, f64)], shown: impl Fn(f64) -> String) -> BarChart {
        let max = data.iter().map(|(_, v)| *v).fold(0.0_f64, f64::max);
        let base = CHART_H + 20;
        let bars = data
            .iter()
            .enumerate()
            .map(|(i, (label, value))| {
                let h = if max > 0.0 {
                    ((value / max) * f64::from(CHART_H)).round() as u32
                } else {
                    0
                };
                let x = BAR_GAP + i as u32 * (BAR_W + BAR_GAP);
                Bar {
                    x,
                    y: base - h,
                    w: BAR_W,
                    h,
                    label: shorten(label, 10),
                    value: shown(*value),
                    cx: x + BAR_W / 2,
                }
            })
            .collect::<Vec<_>>();
        BarChart {
            title: title.to_owned(),
            empty: "No data yet",
            width: (BAR_GAP + data.len() as u32 * (BAR_W + BAR_GAP)).max(240),
            height: base + 24,
            base,
            bars,
        }
    }

    /// Says `text` when it has no bar.
    pub fn when_empty(self, text: &'static str) -> BarChart {
        BarChart {
            empty: text,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: &str) -> GraphTask {
        (id.into(), format!("title {id}"), TaskStatus::Pending)
    }

    #[test]
    fn blockers_lead_to_the_task_and_the_task_to_its_dependents() {
        let g = Graph::new(t("b"), vec![t("a1"), t("a2")], vec![t("c")]);
        assert_eq!(g.nodes.len(), 4);
        assert_eq!(g.edges.len(), 3);
        let b = g.nodes.iter().find(|n| n.current).unwrap();
        assert_eq!(b.id, "b");
        let c = g.nodes.iter().find(|n| n.id == "c").unwrap();
        assert!(c.x > b.x);
        assert!(g.nodes.iter().all(|n| n.y + NODE_H <= g.height));
        assert!(g.nodes.iter().all(|n| n.x + NODE_W <= g.width));
    }

    #[test]
    fn long_titles_are_shortened_by_characters() {
        assert_eq!(shorten("ééé", 2), "éé…");
        assert_eq!(shorten("ab", 2), "ab");
    }

    #[test]
    fn bars_scale_to_the_largest_value() {
        let c = BarChart::new("x", &[("a".into(), 2.0), ("b".into(), 4.0)], |v| {
            v.to_string()
        });
        assert_eq!(c.bars[1].h, CHART_H);
        assert_eq!(c.bars[0].h, CHART_H / 2);
        assert_eq!(c.bars[1].y + c.bars[1].h, c.base);
    }
}

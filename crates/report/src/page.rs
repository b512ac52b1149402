//! The HTML page: one self-contained document (inline CSS and SVG, a Content-Security-Policy
//! that forbids every fetch and every script), sections of figures and tables.

use std::fmt::Write;

use crate::svg::escape;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd}\
.meta{color:#666}.figures{display:flex;flex-wrap:wrap;gap:16px}\
svg.chart{border:1px solid #eee;flex:1 1 560px;min-width:0;height:auto}\
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}\
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f5f5f5}\
td.text,th.text{text-align:left}.bad{color:#b00}.good{color:#070}";

/// A table: headers and rows of cells; cells are text (escaped here).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows.
    pub rows: Vec<Vec<Cell>>,
}

/// One table cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Text.
    pub text: String,
    /// A CSS class (`text` for left-aligned text, `good`, `bad`).
    pub class: Option<&'static str>,
}

impl Cell {
    /// A right-aligned (numeric) cell.
    pub fn num(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            class: None,
        }
    }

    /// A left-aligned text cell.
    pub fn text(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            class: Some("text"),
        }
    }

    /// A cell with `class`.
    pub fn with(text: impl Into<String>, class: &'static str) -> Cell {
        Cell {
            text: text.into(),
            class: Some(class),
        }
    }
}

impl Table {
    fn render(&self, out: &mut String) {
        out.push_str("<table><thead><tr>");
        for (i, h) in self.headers.iter().enumerate() {
            let class = if i == 0 { r#" class="text""# } else { "" };
            let _ = write!(out, "<th{class}>{}</th>", escape(h));
        }
        out.push_str("</tr></thead><tbody>");
        for row in &self.rows {
            out.push_str("<tr>");
            for cell in row {
                match cell.class {
                    Some(c) => {
                        let _ = write!(out, r#"<td class="{c}">{}</td>"#, escape(&cell.text));
                    }
                    None => {
                        let _ = write!(out, "<td>{}</td>", escape(&cell.text));
                    }
                }
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
    }
}

/// One part of a section.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A paragraph of text.
    Text(String),
    /// Figures side by side (each an `<svg>` element, drawn by [`crate::svg`]).
    Figures(Vec<String>),
    /// A table.
    Table(Table),
}

/// A headed part of the page.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// Anchor.
    pub id: String,
    /// Heading.
    pub title: String,
    /// Content.
    pub blocks: Vec<Block>,
}

/// The whole page.
pub fn render(title: &str, meta: &str, sections: &[Section]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><style>{STYLE}</style></head><body><h1>{t}</h1><p class=\"meta\">{}</p>",
        escape(meta),
        t = escape(title),
    );
    if sections.len() > 1 {
        out.push_str("<nav><ul>");
        for s in sections {
            let _ = write!(
                out,
                "<li><a href=\"#{}\">{}</a></li>",
                escape(&s.id),
                escape(&s.title)
            );
        }
        out.push_str("</ul></nav>");
    }
    for s in sections {
        let _ = write!(
            out,
            "<section id=\"{}\"><h2>{}</h2>",
            escape(&s.id),
            escape(&s.title)
        );
        for b in &s.blocks {
            match b {
                Block::Text(t) => {
                    let _ = write!(out, "<p>{}</p>", escape(t));
                }
                Block::Figures(figs) => {
                    out.push_str("<div class=\"figures\">");
                    figs.iter().for_each(|f| out.push_str(f));
                    out.push_str("</div>");
                }
                Block::Table(t) => t.render(&mut out),
            }
        }
        out.push_str("</section>");
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_self_contained_and_escapes_text() {
        let page = render(
            "eckpt <report>",
            "from a & b",
            &[Section {
                id: "s\"1".into(),
                title: "One".into(),
                blocks: vec![
                    Block::Text("<script>alert(1)</script>".into()),
                    Block::Table(Table {
                        headers: vec!["a".into(), "b".into()],
                        rows: vec![vec![Cell::text("x<y"), Cell::num("1")]],
                    }),
                ],
            }],
        );
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("default-src 'none'"));
        assert!(!page.contains("<script"));
        assert!(page.contains("eckpt &lt;report&gt;"));
        assert!(page.contains("x&lt;y"));
        assert!(!page.contains("src=") && !page.contains("href=\"http"));
    }
}

//! A small SVG writer for `tern-lab chart`: rectangles, lines, polylines and text, with
//! the text escaped. Written by hand because the charts use only these four elements:
//! the plotting crates' SVG back ends would still need our own code for grouped bars
//! with value labels and whiskers, and their text layout guesses font metrics anyway.

use std::fmt::Write as _;

/// Where a text's x coordinate sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// x is the text's left edge.
    Start,
    /// x is the text's centre.
    Middle,
    /// x is the text's right edge.
    End,
}

/// An SVG document being drawn.
#[derive(Debug)]
pub struct Svg {
    width: f64,
    height: f64,
    body: String,
}

impl Svg {
    /// A white canvas of `width` × `height` pixels.
    pub fn new(width: f64, height: f64) -> Svg {
        let mut s = Svg {
            width,
            height,
            body: String::new(),
        };
        s.rect(0.0, 0.0, width, height, "#ffffff");
        s
    }

    /// A filled rectangle (negative sizes are drawn as zero).
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
            w.max(0.0),
            h.max(0.0),
            escape(fill)
        );
    }

    /// A straight line; `dash` draws it dashed.
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: &str, width: f64, dash: bool) {
        let dash = if dash {
            r#" stroke-dasharray="5,4""#
        } else {
            ""
        };
        let _ = writeln!(
            self.body,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="{width}"{dash}/>"#,
            from.0,
            from.1,
            to.0,
            to.1,
            escape(stroke)
        );
    }

    /// A line through `points` (nothing for fewer than two).
    pub fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, width: f64) {
        if points.len() < 2 {
            return;
        }
        let mut p = String::new();
        for (x, y) in points {
            let _ = write!(p, "{x:.1},{y:.1} ");
        }
        let _ = writeln!(
            self.body,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="{width}" stroke-linejoin="round"/>"#,
            p.trim_end(),
            escape(stroke)
        );
    }

    /// Text at (x, y), y being its baseline.
    pub fn text(&mut self, x: f64, y: f64, text: &str, size: f64, anchor: Anchor, fill: &str) {
        self.styled_text(x, y, text, size, anchor, fill, false);
    }

    /// Bold text at (x, y).
    pub fn bold(&mut self, x: f64, y: f64, text: &str, size: f64, anchor: Anchor, fill: &str) {
        self.styled_text(x, y, text, size, anchor, fill, true);
    }

    #[allow(clippy::too_many_arguments)]
    fn styled_text(
        &mut self,
        x: f64,
        y: f64,
        text: &str,
        size: f64,
        anchor: Anchor,
        fill: &str,
        bold: bool,
    ) {
        let anchor = match anchor {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        };
        let weight = if bold { r#" font-weight="bold""# } else { "" };
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}" fill="{}"{weight}>{}</text>"#,
            escape(fill),
            escape(text)
        );
    }

    /// The finished document.
    pub fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n{}</svg>\n",
            self.body,
            w = self.width,
            h = self.height
        )
    }
}

/// `text` with XML's special characters escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_the_document_closed() {
        let mut s = Svg::new(100.0, 50.0);
        s.text(1.0, 2.0, "a<b & \"c\"", 10.0, Anchor::Middle, "#000");
        let doc = s.finish();
        assert!(doc.contains("a&lt;b &amp; &quot;c&quot;"), "{doc}");
        assert!(doc.starts_with("<svg ") && doc.ends_with("</svg>\n"));
        assert!(doc.contains(r#"text-anchor="middle""#));
    }

    #[test]
    fn a_polyline_needs_two_points() {
        let mut s = Svg::new(10.0, 10.0);
        s.polyline(&[(1.0, 1.0)], "red", 1.0);
        assert!(!s.finish().contains("polyline"));
        let mut s = Svg::new(10.0, 10.0);
        s.polyline(&[(1.0, 1.0), (2.0, 3.0)], "red", 1.0);
        assert!(s.finish().contains(r#"points="1.0,1.0 2.0,3.0""#));
    }
}

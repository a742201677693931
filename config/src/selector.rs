//! Calico label selectors (`rack == 'r1' && !has(edge)`): parsing them and matching them
//! against a node's labels, for BGPPeer `nodeSelector` and `peerSelector`.
//!
//! The parser is hand-written recursive descent because no maintained Rust crate
//! implements Calico's selector grammar: it is neither the Kubernetes label-selector
//! syntax nor a general expression language, and it is small enough that a parser
//! generator would add a dependency without removing much code. Writing it by hand also
//! lets every error name the position and what was expected there.
//!
//! The accepted grammar (whitespace may appear between any two tokens):
//!
//! ```text
//! selector = [ or ]                  ; empty or blank selects everything
//! or       = and *( "||" and )
//! and      = unary *( "&&" unary )  ; so && binds tighter than ||
//! unary    = *( "!" ) primary
//! primary  = "(" or ")" | "all" "(" ")" | "has" "(" label ")" | label op
//! op       = ( "==" | "!=" | "contains" | "starts with" | "ends with" ) string
//!          | ( "in" | "not in" ) "{" [ string *( "," string ) [ "," ] ] "}"
//! label    = 1*( ALPHA | DIGIT | "-" | "_" | "." | "/" )
//! string   = "'" *( any but "'" ) "'" | DQUOTE *( any but DQUOTE ) DQUOTE
//! ```
//!
//! This follows Calico's own tokenizer and parser (libcalico-go `lib/selector`) so that
//! a selector Calico accepts is accepted here with the same meaning, including its
//! spellings `startswith`, `endswith` and `notin` and a trailing comma in a set. It
//! differs only here:
//!
//! - `global()` is rejected: it only means something in a `namespaceSelector`, and a
//!   BGP selector using it is a mistake worth reporting.
//! - Parentheses may nest at most [`MAX_NESTING`] deep, so hostile input cannot
//!   overflow the stack.
//! - Operator words must be whole words (`a containsx 'y'` is an error, where Calico
//!   would read `contains` then a stray label and fail later with a vaguer message).
//! - Any ASCII whitespace separates tokens (Calico: only space and tab), because YAML
//!   folded and literal scalars put newlines into long selectors; for the same reason
//!   `has (k)` and `all ( )` may have space before the `(`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// How deeply parentheses may nest. Real selectors use two or three levels; the cap
/// exists so that parsing, matching and dropping a selector never recurse without bound.
pub const MAX_NESTING: usize = 64;

/// A parsed Calico label selector.
///
/// ```
/// use std::collections::BTreeMap;
/// use tern_config::selector::Selector;
///
/// let sel = Selector::parse("role in {'tor', 'spine'} && !has(drain)").unwrap();
/// let labels = BTreeMap::from([("role".to_string(), "tor".to_string())]);
/// assert!(sel.matches(&labels));
/// assert_eq!(sel.to_string(), "role in {'tor', 'spine'} && !has(drain)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// Kept verbatim so messages and status output show what the user wrote, not a
    /// re-rendering of the tree.
    text: String,
    expr: Expr,
}

/// A selector that cannot be parsed: where, and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("selector `{text}`: at {position}: {message}")]
pub struct SelectorError {
    /// The selector as given.
    pub text: String,
    /// 0-based character (not byte) offset into `text` of the problem; equal to the
    /// number of characters when the selector ended too early.
    pub position: usize,
    /// What was expected and what was found instead, e.g.
    /// "expected a quoted string but the selector ended".
    pub message: String,
}

impl Selector {
    /// Parses a selector in Calico's syntax. An empty or blank selector selects
    /// everything, as `all()` does.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let mut parser = Parser {
            text,
            pos: 0,
            depth: 0,
        };
        parser.skip_ws();
        let expr = if parser.at_end() {
            Expr::All
        } else {
            let expr = parser.parse_or()?;
            parser.skip_ws();
            if !parser.at_end() {
                return Err(parser.expected("'&&', '||' or the end of the selector"));
            }
            expr
        };
        Ok(Selector {
            text: text.to_string(),
            expr,
        })
    }

    /// Whether a resource with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.expr.matches(labels)
    }

    /// The selector `all()`, which matches every set of labels.
    pub fn all() -> Selector {
        Selector {
            text: "all()".to_string(),
            expr: Expr::All,
        }
    }

    /// The selector exactly as it was written.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Selector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Selector, SelectorError> {
        Selector::parse(text)
    }
}

/// The parsed form. `&&` and `||` chains are kept flat so that long chains cost no
/// recursion; only parentheses and `!` nest.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expr {
    All,
    Has(String),
    Compare {
        label: String,
        op: CompareOp,
        value: String,
    },
    In {
        label: String,
        values: BTreeSet<String>,
        negated: bool,
    },
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CompareOp {
    Eq,
    Ne,
    Contains,
    StartsWith,
    EndsWith,
}

impl CompareOp {
    fn as_str(self) -> &'static str {
        match self {
            CompareOp::Eq => "==",
            CompareOp::Ne => "!=",
            CompareOp::Contains => "contains",
            CompareOp::StartsWith => "starts with",
            CompareOp::EndsWith => "ends with",
        }
    }
}

impl Expr {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Expr::All => true,
            Expr::Has(label) => labels.contains_key(label),
            Expr::Compare { label, op, value } => {
                let actual = labels.get(label);
                match op {
                    CompareOp::Eq => actual == Some(value),
                    // Calico: `k != 'v'` also selects resources without `k`.
                    CompareOp::Ne => actual != Some(value),
                    CompareOp::Contains => actual.is_some_and(|a| a.contains(value.as_str())),
                    CompareOp::StartsWith => actual.is_some_and(|a| a.starts_with(value.as_str())),
                    CompareOp::EndsWith => actual.is_some_and(|a| a.ends_with(value.as_str())),
                }
            }
            // Calico: `k not in {...}` also selects resources without `k`.
            Expr::In {
                label,
                values,
                negated,
            } => labels.get(label).is_some_and(|a| values.contains(a)) != *negated,
            Expr::Not(inner) => !inner.matches(labels),
            Expr::And(terms) => terms.iter().all(|t| t.matches(labels)),
            Expr::Or(terms) => terms.iter().any(|t| t.matches(labels)),
        }
    }
}

/// What a primary expression may start with, shared by several messages.
const EXPECTED_PRIMARY: &str = "expected a label name, has(), all() or '('";

/// Recursive-descent parser working directly on the text: the grammar's keywords are
/// only keywords after a label, so deciding what a word is needs the parser's context
/// and a separate tokenizer would have to guess.
struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next unread character; always on a char boundary because it
    /// only advances past whole ASCII tokens or to a position `str::find` returned.
    pos: usize,
    /// Open parentheses around the current position.
    depth: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or("")
    }

    fn at_end(&self) -> bool {
        self.rest().is_empty()
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        let trimmed = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
        self.pos += rest.len() - trimmed.len();
    }

    /// Consumes `token` (after any whitespace) if it comes next.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    /// Consumes the run of label characters that comes next, if any. Operator words
    /// and function names are read the same way and told apart by the caller.
    fn word(&mut self) -> Option<&'a str> {
        self.skip_ws();
        let rest = self.rest();
        let len = rest.find(|c: char| !is_label_char(c)).unwrap_or(rest.len());
        let word = rest.get(..len).filter(|w| !w.is_empty())?;
        self.pos += len;
        Some(word)
    }

    fn parse_or(&mut self) -> Result<Expr, SelectorError> {
        let mut terms = vec![self.parse_and()?];
        while self.eat("||") {
            terms.push(self.parse_and()?);
        }
        Ok(single_or(terms, Expr::Or))
    }

    fn parse_and(&mut self) -> Result<Expr, SelectorError> {
        let mut terms = vec![self.parse_unary()?];
        while self.eat("&&") {
            terms.push(self.parse_unary()?);
        }
        Ok(single_or(terms, Expr::And))
    }

    fn parse_unary(&mut self) -> Result<Expr, SelectorError> {
        // Collapsing a run of `!` into its parity (as Calico does) means `!!!!…x` of
        // any length neither nests the tree nor counts against the depth limit.
        let mut negated = false;
        while self.eat("!") {
            negated = !negated;
        }
        let expr = self.parse_primary()?;
        Ok(if negated {
            Expr::Not(Box::new(expr))
        } else {
            expr
        })
    }

    fn parse_primary(&mut self) -> Result<Expr, SelectorError> {
        self.skip_ws();
        let start = self.pos;
        if self.eat("(") {
            if self.depth >= MAX_NESTING {
                return Err(self.error_at(
                    start,
                    format!("parentheses nest more than {MAX_NESTING} deep"),
                ));
            }
            self.depth += 1;
            let inner = self.parse_or()?;
            self.depth -= 1;
            if !self.eat(")") {
                let open = self.char_position(start);
                return Err(self.expected(&format!("'&&', '||' or ')' to close the '(' at {open}")));
            }
            return Ok(inner);
        }
        let Some(word) = self.word() else {
            return Err(self.expected_msg(EXPECTED_PRIMARY));
        };
        // A label is never followed by '(', so a word then '(' is a function call.
        if self.eat("(") {
            return self.parse_function(start, word);
        }
        self.parse_operation(word)
    }

    fn parse_function(&mut self, start: usize, name: &str) -> Result<Expr, SelectorError> {
        match name {
            "all" => {
                if !self.eat(")") {
                    return Err(self.expected("')' after 'all('"));
                }
                Ok(Expr::All)
            }
            "has" => {
                let Some(label) = self.word() else {
                    return Err(self.expected("a label name inside has()"));
                };
                if !self.eat(")") {
                    return Err(self.expected(&format!("')' after 'has({label}'")));
                }
                Ok(Expr::Has(label.to_string()))
            }
            "global" => Err(self.error_at(
                start,
                "global() only has a meaning in a namespaceSelector; expected has(), all() \
                 or a label comparison"
                    .to_string(),
            )),
            other => Err(self.error_at(
                start,
                format!("unknown function `{other}()`; expected has() or all()"),
            )),
        }
    }

    /// Parses what follows a label: an operator and its operand.
    fn parse_operation(&mut self, label: &str) -> Result<Expr, SelectorError> {
        let op = if self.eat("==") {
            CompareOp::Eq
        } else if self.eat("!=") {
            CompareOp::Ne
        } else {
            let op_start = self.pos;
            // Calico also accepts the word operators written as one word
            // (`startswith`, `notin`), so those spellings stay valid here.
            match self.word().unwrap_or("") {
                "contains" => CompareOp::Contains,
                "startswith" => CompareOp::StartsWith,
                "endswith" => CompareOp::EndsWith,
                "starts" => {
                    self.expect_word("starts", "with")?;
                    CompareOp::StartsWith
                }
                "ends" => {
                    self.expect_word("ends", "with")?;
                    CompareOp::EndsWith
                }
                word @ ("in" | "notin" | "not") => {
                    if word == "not" {
                        self.expect_word("not", "in")?;
                    }
                    return Ok(Expr::In {
                        label: label.to_string(),
                        values: self.set()?,
                        negated: word != "in",
                    });
                }
                _ => {
                    // Rewind so the message shows the offending word itself.
                    self.pos = op_start;
                    return Err(self.expected(&format!(
                        "an operator (==, !=, in, not in, contains, starts with, ends with) \
                         after `{label}`"
                    )));
                }
            }
        };
        let value = self.string(&format!("a quoted string after '{}'", op.as_str()))?;
        Ok(Expr::Compare {
            label: label.to_string(),
            op,
            value,
        })
    }

    /// Requires the second word of a two-word operator (`starts with`, `not in`).
    fn expect_word(&mut self, first: &str, second: &str) -> Result<(), SelectorError> {
        let before = self.pos;
        if self.word() == Some(second) {
            Ok(())
        } else {
            self.pos = before;
            Err(self.expected(&format!("'{second}' after '{first}'")))
        }
    }

    /// Parses `{ 'a', "b" }`; the set may be empty and may end with a comma.
    fn set(&mut self) -> Result<BTreeSet<String>, SelectorError> {
        if !self.eat("{") {
            return Err(self.expected("'{' to start a set of values"));
        }
        let mut values = BTreeSet::new();
        loop {
            if self.eat("}") {
                return Ok(values);
            }
            values.insert(self.string("a quoted string or '}'")?);
            if self.eat("}") {
                return Ok(values);
            }
            if !self.eat(",") {
                return Err(self.expected("',' or '}' in the set of values"));
            }
        }
    }

    /// Parses a string in single or double quotes. Like Calico there are no escapes: a
    /// value containing one kind of quote is written in the other.
    fn string(&mut self, expected: &str) -> Result<String, SelectorError> {
        self.skip_ws();
        let start = self.pos;
        let rest = self.rest();
        let quote = match rest.chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(self.expected(expected)),
        };
        let body = rest.get(1..).unwrap_or("");
        let Some(len) = body.find(quote) else {
            return Err(self.error_at(
                start,
                format!("unterminated string: expected a closing {quote} but the selector ended"),
            ));
        };
        let value = body.get(..len).unwrap_or("").to_string();
        self.pos += len + 2;
        Ok(value)
    }

    /// An error at the next token: "expected {what} but found …".
    fn expected(&mut self, what: &str) -> SelectorError {
        self.expected_msg(&format!("expected {what}"))
    }

    fn expected_msg(&mut self, expected: &str) -> SelectorError {
        self.skip_ws();
        let rest = self.rest();
        let found = match rest.chars().next() {
            None => "but the selector ended".to_string(),
            Some('\'' | '"') => "but found a quoted string".to_string(),
            Some(c) if is_label_char(c) => {
                let len = rest.find(|c: char| !is_label_char(c)).unwrap_or(rest.len());
                format!("but found `{}`", rest.get(..len).unwrap_or(""))
            }
            Some(c) => format!("but found `{}`", c.escape_debug()),
        };
        self.error_at(self.pos, format!("{expected} {found}"))
    }

    fn error_at(&self, byte: usize, message: String) -> SelectorError {
        SelectorError {
            text: self.text.to_string(),
            position: self.char_position(byte),
            message,
        }
    }

    /// Characters, not bytes, because people count characters when they look for the
    /// spot in a selector that holds non-ASCII values.
    fn char_position(&self, byte: usize) -> usize {
        self.text.get(..byte).map_or(byte, |s| s.chars().count())
    }
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

/// One term stands for itself; several are joined by `join` (`And`/`Or`).
fn single_or(mut terms: Vec<Expr>, join: fn(Vec<Expr>) -> Expr) -> Expr {
    if terms.len() == 1 {
        if let Some(term) = terms.pop() {
            return term;
        }
    }
    join(terms)
}

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use super::{Selector, SelectorError, MAX_NESTING};

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[track_caller]
fn sel(text: &str) -> Selector {
    match Selector::parse(text) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

#[track_caller]
fn err(text: &str) -> SelectorError {
    match Selector::parse(text) {
        Ok(s) => panic!("selector `{text}` parsed as {s:?}, expected an error"),
        Err(e) => e,
    }
}

/// Checks a selector against label sets it must and must not match.
#[track_caller]
fn check(text: &str, yes: &[&[(&str, &str)]], no: &[&[(&str, &str)]]) {
    let s = sel(text);
    for l in yes {
        assert!(s.matches(&labels(l)), "`{text}` should match {l:?}");
    }
    for l in no {
        assert!(!s.matches(&labels(l)), "`{text}` should not match {l:?}");
    }
}

// ---- Calico's documented examples -------------------------------------------------

#[test]
fn equality() {
    check(
        "rack == 'rack-1'",
        &[&[("rack", "rack-1")], &[("rack", "rack-1"), ("zone", "a")]],
        &[&[], &[("rack", "rack-2")], &[("zone", "rack-1")]],
    );
}

#[test]
fn double_quotes_mean_the_same_as_single() {
    check(
        r#"rack == "rack-1""#,
        &[&[("rack", "rack-1")]],
        &[&[("rack", "rack-2")]],
    );
}

#[test]
fn each_quote_style_can_hold_the_other_quote() {
    check(
        r#"a in {"'", '"', "c"}"#,
        &[&[("a", "'")], &[("a", "\"")], &[("a", "c")]],
        &[&[], &[("a", "e")]],
    );
    check(r#"a == "it's""#, &[&[("a", "it's")]], &[&[("a", "its")]]);
}

#[test]
fn not_equal_also_selects_when_the_label_is_absent() {
    check(
        "rack != 'rack-1'",
        &[&[], &[("rack", "rack-2")], &[("zone", "rack-1")]],
        &[&[("rack", "rack-1")]],
    );
}

#[test]
fn in_set() {
    check(
        "role in {'tor','spine'}",
        &[&[("role", "tor")], &[("role", "spine")]],
        &[&[], &[("role", "leaf")], &[("other", "tor")]],
    );
}

#[test]
fn not_in_set_also_selects_when_the_label_is_absent() {
    check(
        "role not in { 'tor', 'spine' }",
        &[&[], &[("role", "leaf")]],
        &[&[("role", "tor")], &[("role", "spine")]],
    );
}

#[test]
fn empty_sets() {
    check("role in {}", &[], &[&[], &[("role", "")]]);
    check("role not in {  }", &[&[], &[("role", "")]], &[]);
}

#[test]
fn set_may_end_with_a_comma_like_calico_allows() {
    check("role in {'tor',}", &[&[("role", "tor")]], &[&[]]);
}

#[test]
fn has_and_not_has() {
    check(
        "has(route-reflector) && !has(edge)",
        &[
            &[("route-reflector", "")],
            &[("route-reflector", "x"), ("a", "b")],
        ],
        &[
            &[],
            &[("route-reflector", "x"), ("edge", "")],
            &[("edge", "")],
        ],
    );
}

#[test]
fn contains_starts_with_ends_with() {
    check(
        "zone contains 'east'",
        &[&[("zone", "us-east-1")], &[("zone", "east")]],
        &[&[], &[("zone", "us-west-1")], &[("other", "east")]],
    );
    check(
        "zone starts with 'us-'",
        &[&[("zone", "us-east-1")]],
        &[&[], &[("zone", "eu-us-1")]],
    );
    check(
        "zone ends with '-1'",
        &[&[("zone", "us-east-1")]],
        &[&[], &[("zone", "us-east-2")]],
    );
}

#[test]
fn one_word_operator_spellings_calico_accepts() {
    check("a startswith 'x'", &[&[("a", "xy")]], &[&[("a", "yx")]]);
    check("a endswith 'x'", &[&[("a", "yx")]], &[&[("a", "xy")]]);
    check("a notin {'x'}", &[&[("a", "y")], &[]], &[&[("a", "x")]]);
}

#[test]
fn all_empty_and_blank_select_everything() {
    for text in ["all()", "", "   ", " \t\n ", " all( ) ", "(all())"] {
        check(text, &[&[], &[("a", "b")]], &[]);
    }
    assert!(Selector::all().matches(&labels(&[])));
    assert_eq!(Selector::all().text(), "all()");
    assert_eq!(Selector::all(), sel("all()"));
}

#[test]
fn grouped_expression() {
    check(
        "(a == 'x' || b == 'y') && c != 'z'",
        &[&[("a", "x")], &[("b", "y"), ("c", "w")]],
        &[&[], &[("a", "x"), ("c", "z")], &[("c", "w")]],
    );
}

#[test]
fn kubernetes_style_label_keys() {
    check(
        "kubernetes.io/hostname == 'node-a'",
        &[&[("kubernetes.io/hostname", "node-a")]],
        &[
            &[("hostname", "node-a")],
            &[("kubernetes.io/hostname", "node-b")],
        ],
    );
    check(
        "projectcalico.org/namespace in {'kube-system'} && has(topology.kubernetes.io/zone)",
        &[&[
            ("projectcalico.org/namespace", "kube-system"),
            ("topology.kubernetes.io/zone", "z1"),
        ]],
        &[&[("projectcalico.org/namespace", "kube-system")]],
    );
    check("_a-1.b/C_2 == '3'", &[&[("_a-1.b/C_2", "3")]], &[&[]]);
}

#[test]
fn operator_words_are_ordinary_label_names_in_label_position() {
    check("in in {'x'}", &[&[("in", "x")]], &[&[("in", "y")]]);
    check("has == 'y'", &[&[("has", "y")]], &[&[]]);
    check("all != 'z'", &[&[]], &[&[("all", "z")]]);
    check("not not in {'a'}", &[&[]], &[&[("not", "a")]]);
    check("contains contains 'b'", &[&[("contains", "abc")]], &[&[]]);
}

// ---- Operators, precedence, negation ----------------------------------------------

#[test]
fn and_binds_tighter_than_or() {
    let text = "a == '1' || b == '1' && c == '1'";
    // Read as a || (b && c): `a` alone is enough, `b` alone is not.
    check(
        text,
        &[&[("a", "1")], &[("b", "1"), ("c", "1")]],
        &[&[("b", "1")], &[("c", "1")]],
    );
    // And the other way round.
    check(
        "a == '1' && b == '1' || c == '1'",
        &[&[("c", "1")], &[("a", "1"), ("b", "1")]],
        &[&[("a", "1")]],
    );
}

#[test]
fn parentheses_override_precedence() {
    check(
        "(a == '1' || b == '1') && c == '1'",
        &[&[("a", "1"), ("c", "1")]],
        &[&[("a", "1")]],
    );
}

#[test]
fn negation_of_any_expression() {
    check("!(a == 'b')", &[&[], &[("a", "c")]], &[&[("a", "b")]]);
    check(
        "!(!has(a) || has(b))",
        &[&[("a", "")]],
        &[&[], &[("a", ""), ("b", "")]],
    );
    check("!all()", &[], &[&[]]);
    // `!` applies to the operation that follows, not to the rest of the chain.
    check(
        "! a == 'a1' || ! b == 'b1'",
        &[&[], &[("a", "a1")]],
        &[&[("a", "a1"), ("b", "b1")]],
    );
    check("!a in {'a'}", &[&[("a", "b")], &[]], &[&[("a", "a")]]);
}

#[test]
fn repeated_negation_cancels() {
    check("!!has(a)", &[&[("a", "")]], &[&[]]);
    check("! !! has(a)", &[&[]], &[&[("a", "")]]);
    let many = format!("{}has(a)", "!".repeat(100_000));
    check(&many, &[&[("a", "")]], &[&[]]);
}

#[test]
fn whitespace_is_optional_and_may_be_any_ascii_whitespace() {
    check(
        "a=='b'&&has(c)||!has(d)",
        &[&[("a", "b"), ("c", "")], &[]],
        &[&[("d", "")]],
    );
    check(
        "\n\ta\n==\r\n'b'\t&&\n  has( c )  \n",
        &[&[("a", "b"), ("c", "")]],
        &[&[("a", "b")]],
    );
    check("a in{'x'}", &[&[("a", "x")]], &[&[]]);
    check("has (a)", &[&[("a", "")]], &[&[]]);
}

#[test]
fn values_are_taken_verbatim() {
    check("a == ' b '", &[&[("a", " b ")]], &[&[("a", "b")]]);
    check("a == ''", &[&[("a", "")]], &[&[]]);
    check("a == 'é && ||'", &[&[("a", "é && ||")]], &[&[]]);
}

#[test]
fn long_chains_parse_without_recursion() {
    let text = vec!["has(a)"; 10_000].join(" && ");
    check(&text, &[&[("a", "")]], &[&[]]);
    let text = vec!["has(a)"; 10_000].join(" || ");
    check(&text, &[&[("a", "")]], &[&[]]);
}

// ---- Display and text -------------------------------------------------------------

#[test]
fn display_and_text_show_the_original_text() {
    for text in ["  rack ==   \"r1\"  ", "", "all()", "a in {'x','y'}"] {
        let s = sel(text);
        assert_eq!(s.text(), text);
        assert_eq!(s.to_string(), text);
        assert_eq!(text.parse::<Selector>(), Ok(s));
    }
}

// ---- Errors -------------------------------------------------------------------------

#[test]
fn error_dangling_and() {
    assert_eq!(
        err("role == 'tor' &&").to_string(),
        "selector `role == 'tor' &&`: at 16: expected a label name, has(), all() or '(' \
         but the selector ended"
    );
}

#[test]
fn error_dangling_comparison() {
    assert_eq!(
        err("rack ==").to_string(),
        "selector `rack ==`: at 7: expected a quoted string after '==' but the selector ended"
    );
    assert_eq!(
        err("foo != ||").to_string(),
        "selector `foo != ||`: at 7: expected a quoted string after '!=' but found `|`"
    );
}

#[test]
fn error_unterminated_string() {
    assert_eq!(
        err("rack == 'rack-1").to_string(),
        "selector `rack == 'rack-1`: at 8: unterminated string: expected a closing ' \
         but the selector ended"
    );
    // A quote of the other kind does not close it.
    assert_eq!(err(r#"a == "x'"#).position, 5);
}

#[test]
fn error_missing_closing_brace() {
    assert_eq!(
        err("role in {'tor', 'spine'").to_string(),
        "selector `role in {'tor', 'spine'`: at 23: expected ',' or '}' in the set of values \
         but the selector ended"
    );
    assert_eq!(
        err("role in {'tor' 'spine'}").message,
        "expected ',' or '}' in the set of values but found a quoted string"
    );
    assert_eq!(
        err(r#"foo in {"", ||"#).message,
        "expected a quoted string or '}' but found `|`"
    );
    assert_eq!(
        err("a in {,}").message,
        "expected a quoted string or '}' but found `,`"
    );
}

#[test]
fn error_set_without_braces() {
    assert_eq!(
        err("a in 'x'").to_string(),
        "selector `a in 'x'`: at 5: expected '{' to start a set of values but found a quoted string"
    );
}

#[test]
fn error_unknown_function() {
    assert_eq!(
        err("foo(bar)").to_string(),
        "selector `foo(bar)`: at 0: unknown function `foo()`; expected has() or all()"
    );
    assert_eq!(err("a == 'b' && any(c)").position, 12);
}

#[test]
fn error_global_is_rejected() {
    assert_eq!(
        err("has(a) && global()").to_string(),
        "selector `has(a) && global()`: at 10: global() only has a meaning in a \
         namespaceSelector; expected has(), all() or a label comparison"
    );
}

#[test]
fn error_trailing_garbage() {
    assert_eq!(
        err("a == 'b' c").to_string(),
        "selector `a == 'b' c`: at 9: expected '&&', '||' or the end of the selector but found `c`"
    );
    assert_eq!(
        err("a == 'b' & c == 'd'").message,
        "expected '&&', '||' or the end of the selector but found `&`"
    );
    assert_eq!(
        err("has(a))").message,
        "expected '&&', '||' or the end of the selector but found `)`"
    );
}

#[test]
fn error_unclosed_parenthesis() {
    assert_eq!(
        err("x == 'y' && (a == 'x'").to_string(),
        "selector `x == 'y' && (a == 'x'`: at 21: expected '&&', '||' or ')' to close the '(' \
         at 12 but the selector ended"
    );
}

#[test]
fn error_missing_or_wrong_operator() {
    assert_eq!(
        err("rack = 'x'").to_string(),
        "selector `rack = 'x'`: at 5: expected an operator (==, !=, in, not in, contains, \
         starts with, ends with) after `rack` but found `=`"
    );
    assert_eq!(
        err("rack").message,
        "expected an operator (==, !=, in, not in, contains, starts with, ends with) after \
         `rack` but the selector ended"
    );
    assert_eq!(
        err("a containsx 'y'").message,
        "expected an operator (==, !=, in, not in, contains, starts with, ends with) after \
         `a` but found `containsx`"
    );
    assert_eq!(
        err("a starts 'x'").message,
        "expected 'with' after 'starts' but found a quoted string"
    );
    assert_eq!(
        err("a not {'x'}").message,
        "expected 'in' after 'not' but found `{`"
    );
}

#[test]
fn error_in_has_and_all() {
    assert_eq!(
        err("has()").message,
        "expected a label name inside has() but found `)`"
    );
    assert_eq!(
        err("has(a b)").message,
        "expected ')' after 'has(a' but found `b`"
    );
    assert_eq!(
        err("all(x)").message,
        "expected ')' after 'all(' but found `x`"
    );
}

#[test]
fn rejects_what_calico_rejects() {
    let bad = [
        "b == b",
        "b contains b",
        "b starts with b",
        "b ends with b",
        "'b1' == b",
        "b",
        "a b",
        "!",
        r#"foo == "bar" &"#,
        r#"foo == "bar" |"#,
        r#"foo in """#,
        r#""FOO"#,
        r#""FOO'"#,
        "'FOO",
        "(",
        r#"(a == "foo""#,
        ")",
        "()",
        "%",
        r#"a == "b" && %"#,
        r#"a == "b" || %"#,
        "a ",
        "has(foo) &&",
        "has(foo",
        "all(",
    ];
    for text in bad {
        let e = err(text);
        assert_eq!(e.text, text);
        assert!(e
            .to_string()
            .starts_with(&format!("selector `{text}`: at ")));
    }
}

#[test]
fn error_position_counts_characters_not_bytes() {
    let e = err("a == 'é' &&");
    assert_eq!(e.position, 11);
    assert!(e.message.ends_with("but the selector ended"));
    // A non-ASCII character where a label should be is shown as itself.
    assert_eq!(
        err("é").message,
        format!("{} but found `é`", super::EXPECTED_PRIMARY)
    );
    assert_eq!(
        err("a == 'b' && \u{0}").message.rsplit(' ').next(),
        Some("`\\0`")
    );
}

// ---- Nesting limit ----------------------------------------------------------------

#[test]
fn nesting_up_to_the_limit_is_accepted() {
    let text = format!(
        "{}has(a){}",
        "(".repeat(MAX_NESTING),
        ")".repeat(MAX_NESTING)
    );
    check(&text, &[&[("a", "")]], &[&[]]);
    let text = format!(
        "{}has(a){}",
        "!(".repeat(MAX_NESTING),
        ")".repeat(MAX_NESTING)
    );
    check(&text, &[&[("a", "")]], &[&[]]);
}

#[test]
fn nesting_beyond_the_limit_is_an_error_not_a_stack_overflow() {
    let text = format!(
        "{}has(a){}",
        "(".repeat(MAX_NESTING + 1),
        ")".repeat(MAX_NESTING + 1)
    );
    let e = err(&text);
    assert_eq!(e.position, MAX_NESTING);
    assert_eq!(e.message, "parentheses nest more than 64 deep");

    let e = err(&"(".repeat(1_000_000));
    assert_eq!(e.position, MAX_NESTING);
    let e = err(&"!(".repeat(1_000_000));
    assert_eq!(e.position, 2 * MAX_NESTING + 1);
}

// ---- Randomized ---------------------------------------------------------------------

/// xorshift64: deterministic, so a failure reproduces, and needs no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Parsing must never panic; whatever it returns must describe the input faithfully.
#[track_caller]
fn parse_and_check_invariants(text: &str, probes: &[BTreeMap<String, String>]) -> bool {
    match Selector::parse(text) {
        Ok(s) => {
            assert_eq!(s.text(), text);
            assert_eq!(s.to_string(), text);
            for l in probes {
                s.matches(l);
            }
            true
        }
        Err(e) => {
            assert_eq!(e.text, text);
            assert!(e.position <= text.chars().count(), "{e}");
            assert!(e
                .to_string()
                .starts_with(&format!("selector `{text}`: at ")));
            false
        }
    }
}

fn probes() -> Vec<BTreeMap<String, String>> {
    vec![
        labels(&[]),
        labels(&[("a", "b"), ("k8s.io/x", "")]),
        labels(&[("a", "x"), ("b", "y"), ("in", "a")]),
    ]
}

/// Pieces of selector syntax, right and wrong, for token soup.
#[rustfmt::skip]
const FRAGMENTS: &[&str] = &[
    "a", "b", "k8s.io/x", "in", "not", "has", "all", "global", "contains", "starts",
    "with", "ends", "startswith", "==", "!=", "=", "!", "&&", "||", "&", "|", "(", ")",
    "{", "}", ",", "'", "\"", "'x'", "\"y\"", " ", " ", "\t", "\n", "é", "%", "\0",
];

#[test]
fn random_token_soup_never_panics() {
    let probes = probes();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut parsed = 0;
    for _ in 0..5_000 {
        let len = rng.below(24);
        let text: String = (0..len).map(|_| rng.pick(FRAGMENTS)).collect();
        if parse_and_check_invariants(&text, &probes) {
            parsed += 1;
        }
    }
    // Some soups are valid (at least the empty ones), so both paths were exercised.
    assert!(parsed > 0);
}

#[test]
fn random_bytes_never_panic() {
    const BYTES: &[u8] = b"ab./-_ \t\n'\"{}(),!=&|%\xc3\xa9\xff\x00hasinotl";
    let probes = probes();
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for _ in 0..5_000 {
        let len = rng.below(40);
        let bytes: Vec<u8> = (0..len).map(|_| rng.pick(BYTES)).collect();
        let text = String::from_utf8_lossy(&bytes);
        parse_and_check_invariants(&text, &probes);
    }
}

/// The intended meaning of a generated selector, computed without the parser.
type Oracle = Box<dyn Fn(&BTreeMap<String, String>) -> bool>;

/// A randomly generated valid selector with an independent oracle for its meaning,
/// written with as few parentheses as precedence allows so precedence is exercised.
struct Generated {
    text: String,
    eval: Oracle,
    kind: Kind,
}

#[derive(PartialEq)]
enum Kind {
    Atom,
    And,
    Or,
}

const KEYS: &[&str] = &["a", "b", "kubernetes.io/hostname", "x-y_z"];
const SPACING: &[&str] = &["", " ", " ", "  ", "\t", "\n"];
const VALUES: &[&str] = &["1", "2", "tor", "", "it's"];

fn quoted(value: &str, rng: &mut Rng) -> String {
    if value.contains('\'') || rng.below(2) == 0 {
        format!("\"{value}\"")
    } else {
        format!("'{value}'")
    }
}

fn ws(rng: &mut Rng) -> &'static str {
    rng.pick(SPACING)
}

fn gen_leaf(rng: &mut Rng) -> Generated {
    let key = rng.pick(KEYS).to_string();
    let value = rng.pick(VALUES).to_string();
    let q = quoted(&value, rng);
    let (text, eval): (String, Oracle) = match rng.below(9) {
        0 => (
            format!("{key}{}=={}{q}", ws(rng), ws(rng)),
            Box::new(move |l| l.get(&key) == Some(&value)),
        ),
        1 => (
            format!("{key}{}!={}{q}", ws(rng), ws(rng)),
            Box::new(move |l| l.get(&key) != Some(&value)),
        ),
        2 => (
            format!("has({}{key}{})", ws(rng), ws(rng)),
            Box::new(move |l| l.contains_key(&key)),
        ),
        3 => ("all()".to_string(), Box::new(|_| true)),
        4 => (
            format!("{key} contains {q}"),
            Box::new(move |l| l.get(&key).is_some_and(|v| v.contains(&value))),
        ),
        5 => (
            format!("{key} starts with {q}"),
            Box::new(move |l| l.get(&key).is_some_and(|v| v.starts_with(&value))),
        ),
        6 => (
            format!("{key} ends with {q}"),
            Box::new(move |l| l.get(&key).is_some_and(|v| v.ends_with(&value))),
        ),
        n => {
            let other = rng.pick(VALUES).to_string();
            let q2 = quoted(&other, rng);
            let negated = n == 8;
            let op = if negated { "not in" } else { "in" };
            (
                format!("{key} {op}{}{{{q},{}{q2}}}", ws(rng), ws(rng)),
                Box::new(move |l| {
                    l.get(&key).is_some_and(|v| *v == value || *v == other) != negated
                }),
            )
        }
    };
    Generated {
        text,
        eval,
        kind: Kind::Atom,
    }
}

fn gen(rng: &mut Rng, depth: usize) -> Generated {
    if depth == 0 || rng.below(3) == 0 {
        return gen_leaf(rng);
    }
    // Parenthesize an operand only when precedence requires it.
    let wrap = |g: Generated, allowed: &[Kind]| -> Generated {
        if allowed.contains(&g.kind) {
            g
        } else {
            Generated {
                text: format!("({})", g.text),
                eval: g.eval,
                kind: Kind::Atom,
            }
        }
    };
    match rng.below(4) {
        0 => {
            let inner = wrap(gen(rng, depth - 1), &[Kind::Atom]);
            Generated {
                text: format!("!{}{}", ws(rng), inner.text),
                eval: Box::new(move |l| !(inner.eval)(l)),
                kind: Kind::Atom,
            }
        }
        1 => {
            let inner = gen(rng, depth - 1);
            Generated {
                text: format!("({}{}{})", ws(rng), inner.text, ws(rng)),
                eval: inner.eval,
                kind: Kind::Atom,
            }
        }
        2 => {
            let a = wrap(gen(rng, depth - 1), &[Kind::Atom, Kind::And]);
            let b = wrap(gen(rng, depth - 1), &[Kind::Atom]);
            Generated {
                text: format!("{}{}&&{}{}", a.text, ws(rng), ws(rng), b.text),
                eval: Box::new(move |l| (a.eval)(l) && (b.eval)(l)),
                kind: Kind::And,
            }
        }
        _ => {
            let a = wrap(gen(rng, depth - 1), &[Kind::Atom, Kind::And, Kind::Or]);
            let b = wrap(gen(rng, depth - 1), &[Kind::Atom, Kind::And]);
            Generated {
                text: format!("{}{}||{}{}", a.text, ws(rng), ws(rng), b.text),
                eval: Box::new(move |l| (a.eval)(l) || (b.eval)(l)),
                kind: Kind::Or,
            }
        }
    }
}

fn random_labels(rng: &mut Rng) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for key in KEYS {
        if rng.below(2) == 0 {
            labels.insert(key.to_string(), rng.pick(VALUES).to_string());
        }
    }
    labels
}

#[test]
fn random_valid_selectors_parse_and_match_like_an_independent_oracle() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for _ in 0..3_000 {
        let g = gen(&mut rng, 5);
        let s = sel(&g.text);
        assert_eq!(s.text(), g.text);
        let negated = sel(&format!("!({})", g.text));
        for _ in 0..8 {
            let l = random_labels(&mut rng);
            let expected = (g.eval)(&l);
            assert_eq!(s.matches(&l), expected, "`{}` on {l:?}", g.text);
            assert_eq!(negated.matches(&l), !expected, "`!({})` on {l:?}", g.text);
        }
    }
}

//! Recursive-descent parser for §3 statements and the §6.1 expression grammar.
//!
//! On an error it records a diagnostic and skips to the next statement boundary, so every
//! syntax error in a file is reported in one run.

use super::ast::*;
use super::lexer::{lex, Number, Tok, Token};
use crate::diagnostics::{codes, Diagnostic, Span};

/// What the parser knows of functions: nothing by name. The caller (which knows the built-in
/// and registered functions) says which names are called (`f(x)`, not an access `R(x)`) and
/// which of those may be called inside an index (`A[max(i, j)]`).
#[derive(Clone, Copy)]
pub(crate) struct Functions<'a> {
    /// Whether a name followed by `(` is a call.
    pub(crate) call: &'a dyn Fn(&str) -> bool,
    /// Whether a call may stand in an index.
    pub(crate) in_index: &'a dyn Fn(&str) -> bool,
}

/// Parses a whole program; `functions` tells calls from accesses.
pub(crate) fn parse(source: &str, functions: Functions) -> (Program, Vec<Diagnostic>) {
    let (tokens, mut errors) = lex(source);
    let mut p = Parser::new(tokens, source, functions);
    let mut program = Program::default();
    loop {
        p.skip_separators();
        if p.at_end() {
            break;
        }
        let start = p.pos;
        match p.statement() {
            Ok(stmt) => program.statements.push(stmt),
            Err(e) => {
                errors.push(e);
                p.recover(start);
            }
        }
    }
    (program, errors)
}

/// Parses the text of a query as given to `tl query` (with or without the trailing `?`).
pub(crate) fn parse_query(text: &str, functions: Functions) -> Result<Access, Diagnostic> {
    let (tokens, errors) = lex(text);
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    let mut p = Parser::new(tokens, text, functions);
    let access = p.access()?;
    p.eat(&Tok::Question);
    p.skip_separators();
    if !p.at_end() {
        return Err(p.unexpected("the end of the query"));
    }
    Ok(access)
}

type PResult<T> = Result<T, Diagnostic>;

struct Parser<'a> {
    tokens: Vec<Token>,
    /// Whether each token is the first on its source line (recovery stops there even inside
    /// an unclosed bracket).
    line_start: Vec<bool>,
    pos: usize,
    end: usize,
    functions: Functions<'a>,
    depth: usize,
    /// Integer functions called in the indices of the rule being parsed (`H(band(x, 3))`),
    /// each standing for a fresh variable the rule's body binds to the call (§8).
    index_calls: Vec<(Name, Expr)>,
    /// Names at which [`Parser::primary`] failed, by token position. `f(…)` that fails as an
    /// access is parsed again as a call, so without this every nested `g(…)` that fails is
    /// parsed twice per level, in time exponential in the nesting (a fuzzer's 1 KB input
    /// took seconds).
    failed: std::collections::HashMap<usize, Failed>,
    /// How many times the nesting limit has stopped the parse.
    too_deep: usize,
}

/// A failure of [`Parser::primary`] at a name: the same tokens fail the same way, at any
/// depth from `from` on (0 unless the nesting limit was the reason).
struct Failed {
    error: Diagnostic,
    end: usize,
    from: usize,
}

/// Names of the variables standing for index calls start with `#`, which no source
/// identifier can (it starts a comment).
const CALL_VARIABLE: &str = "#call";

/// Deepest nesting of brackets and prefix operators the parser accepts; deeper input is an
/// error rather than a stack overflow.
const MAX_DEPTH: usize = 64;

/// Most `+`/`-` operands in one sum (sums nest as trees that later passes walk recursively).
const MAX_TERMS: usize = 256;

impl<'a> Parser<'a> {
    fn new(tokens: Vec<Token>, source: &str, functions: Functions<'a>) -> Self {
        let mut prev_end = 0;
        let line_start = tokens
            .iter()
            .map(|t| {
                let s = t.span();
                let between = source.get(prev_end..s.start).unwrap_or("");
                prev_end = s.end;
                between.contains('\n')
            })
            .collect();
        Parser {
            tokens,
            line_start,
            pos: 0,
            end: source.len(),
            functions,
            depth: 0,
            index_calls: Vec::new(),
            failed: std::collections::HashMap::new(),
            too_deep: 0,
        }
    }

    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|t| &t.tok)
    }

    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.tokens.get(self.pos + k).map(|t| &t.tok)
    }

    fn span(&self) -> Span {
        self.tokens
            .get(self.pos)
            .map(Token::span)
            .unwrap_or(Span::new(self.end, self.end))
    }

    fn prev_span(&self) -> Span {
        self.pos
            .checked_sub(1)
            .and_then(|i| self.tokens.get(i))
            .map(Token::span)
            .unwrap_or(Span::new(0, 0))
    }

    fn at_end(&self) -> bool {
        self.pos >= self.tokens.len()
    }

    fn bump(&mut self) -> Option<(Tok, Span)> {
        let t = self.tokens.get(self.pos).map(|t| (t.tok.clone(), t.span()));
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    fn eat(&mut self, tok: &Tok) -> bool {
        if self.peek() == Some(tok) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &Tok, what: &str) -> PResult<Span> {
        if self.eat(tok) {
            Ok(self.prev_span())
        } else {
            Err(self.unexpected(what))
        }
    }

    fn unexpected(&self, wanted: &str) -> Diagnostic {
        let found = match self.peek() {
            None => "end of input".to_string(),
            Some(Tok::Newline) => "end of line".to_string(),
            Some(t) => format!("`{}`", describe(t)),
        };
        Diagnostic::error(
            codes::SYNTAX,
            self.span(),
            format!("expected {wanted}, found {found}"),
        )
        .with_label(format!("expected {wanted}"))
    }

    fn skip_separators(&mut self) {
        while matches!(self.peek(), Some(Tok::Newline | Tok::Semi)) {
            self.pos += 1;
        }
    }

    /// Skips to the next statement boundary: a newline, a `;`, or a token that begins a line.
    fn recover(&mut self, start: usize) {
        if self.pos == start {
            self.pos += 1;
        }
        while let Some(t) = self.peek() {
            if matches!(t, Tok::Newline | Tok::Semi) || self.line_start[self.pos] {
                break;
            }
            self.pos += 1;
        }
    }

    fn name(&mut self, what: &str) -> PResult<Name> {
        match self.peek() {
            Some(Tok::Ident(text)) => {
                let name = Name {
                    text: text.to_string(),
                    span: self.span(),
                };
                self.pos += 1;
                Ok(name)
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn end_statement(&mut self) -> PResult<()> {
        if self.eat(&Tok::Dot) {
            return Ok(());
        }
        match self.peek() {
            None | Some(Tok::Newline | Tok::Semi) => Ok(()),
            _ => Err(self.unexpected("the end of the statement")),
        }
    }

    fn statement(&mut self) -> PResult<Statement> {
        let start = self.span();
        self.index_calls.clear();
        let kind = self.statement_kind()?;
        let span = start.to(self.prev_span());
        if let Some((_, call)) = self.index_calls.first() {
            if !matches!(kind, StmtKind::Rule { .. }) {
                return Err(Diagnostic::error(
                    codes::SYNTAX,
                    call.span(),
                    "a function may be called in an index only in a rule",
                )
                .with_note("in an equation, compute the index in a rule first (`I(x, y) :- X(x), y = band(x, 3).`)"));
            }
        }
        self.end_statement()?;
        Ok(Statement { kind, span })
    }

    fn statement_kind(&mut self) -> PResult<StmtKind> {
        if let Some(Tok::Str(path)) = self.peek().cloned() {
            self.pos += 1;
            self.expect(&Tok::Assign, "`=` after the output path")?;
            let name = self.name("the name of the tensor to write")?;
            return Ok(StmtKind::FileWrite {
                path: path.into(),
                name,
            });
        }
        if matches!(self.peek(), Some(Tok::Ident(_))) {
            match self.peek_at(1) {
                Some(Tok::Colon) => return self.declaration(),
                Some(Tok::Tilde) => return self.init(),
                _ => {}
            }
        }
        let lhs = self.access()?;
        match self.peek().cloned() {
            Some(Tok::Question) => {
                self.pos += 1;
                Ok(StmtKind::Query(lhs))
            }
            Some(Tok::Arrow) => {
                self.pos += 1;
                let mut body = vec![self.body_literal()?];
                while self.eat(&Tok::Comma) {
                    body.push(self.body_literal()?);
                }
                for (var, call) in std::mem::take(&mut self.index_calls) {
                    let span = call.span();
                    let var = Expr::Access(Access {
                        span: var.span,
                        name: var,
                        brackets: Brackets::None,
                        indices: Vec::new(),
                    });
                    body.push(Expr::Compare(
                        CmpOp::Eq,
                        Box::new(var),
                        Box::new(call),
                        span,
                    ));
                }
                Ok(StmtKind::Rule { head: lhs, body })
            }
            Some(
                op @ (Tok::Assign
                | Tok::PlusAssign
                | Tok::MaxAssign
                | Tok::MinAssign
                | Tok::AvgAssign),
            ) => {
                self.pos += 1;
                let op = match op {
                    Tok::PlusAssign => AccumOp::Add,
                    Tok::MaxAssign => AccumOp::Max,
                    Tok::MinAssign => AccumOp::Min,
                    Tok::AvgAssign => AccumOp::Avg,
                    _ => AccumOp::Assign,
                };
                self.equation(lhs, op)
            }
            None | Some(Tok::Newline | Tok::Semi | Tok::Dot) => Ok(StmtKind::Fact(lhs)),
            _ => Err(self.unexpected("`=`, `:-`, `?` or the end of the statement")),
        }
    }

    fn equation(&mut self, lhs: Access, op: AccumOp) -> PResult<StmtKind> {
        let bare = lhs.brackets == Brackets::None;
        if bare && op == AccumOp::Assign {
            match self.peek().cloned() {
                Some(Tok::Str(path)) => {
                    self.pos += 1;
                    return Ok(StmtKind::FileRead {
                        name: lhs.name,
                        path: path.into(),
                    });
                }
                Some(Tok::LBracket) => {
                    let value = self.literal()?;
                    return Ok(StmtKind::Literal {
                        name: lhs.name,
                        value,
                    });
                }
                _ => {}
            }
            if let Some((value, is_int)) = self.scalar_literal() {
                return Ok(StmtKind::Scalar {
                    name: lhs.name,
                    value,
                    is_int,
                });
            }
        }
        let rhs = self.cmp()?;
        Ok(StmtKind::Equation { lhs, op, rhs })
    }

    /// A lone (possibly negated) number followed by the end of the statement.
    fn scalar_literal(&mut self) -> Option<(f64, bool)> {
        let (neg, k) = if self.peek() == Some(&Tok::Minus) {
            (true, 1)
        } else {
            (false, 0)
        };
        let Some(Tok::Number(Number { value, is_int, .. })) = self.peek_at(k).cloned() else {
            return None;
        };
        if !matches!(
            self.peek_at(k + 1),
            None | Some(Tok::Newline | Tok::Semi | Tok::Dot)
        ) {
            return None;
        }
        self.pos += k + 1;
        Some((if neg { -value } else { value }, is_int))
    }

    fn literal(&mut self) -> PResult<DenseLiteral> {
        let start = self.span();
        let mut values = Vec::new();
        let shape = self.literal_item(&mut values)?;
        Ok(DenseLiteral {
            shape,
            values,
            span: start.to(self.prev_span()),
        })
    }

    /// One item of a literal, its numbers appended to `values`; returns the item's shape.
    fn literal_item(&mut self, values: &mut Vec<f64>) -> PResult<Vec<usize>> {
        self.enter()?;
        let r = self.literal_item_inner(values);
        self.depth -= 1;
        r
    }

    /// The `]` that closes the list being parsed, for a diagnostic that shows the whole list.
    fn rest_of_literal(&self) -> Span {
        let mut depth = 0usize;
        for t in &self.tokens[self.pos.min(self.tokens.len())..] {
            match t.tok {
                Tok::LBracket => depth += 1,
                Tok::RBracket if depth == 0 => return t.span(),
                Tok::RBracket => depth -= 1,
                Tok::Newline | Tok::Semi => break,
                _ => {}
            }
        }
        self.prev_span()
    }

    fn literal_item_inner(&mut self, values: &mut Vec<f64>) -> PResult<Vec<usize>> {
        if self.peek() == Some(&Tok::LBracket) {
            let start = self.span();
            self.pos += 1;
            let mut rows = 0usize;
            let mut row_shape: Option<Vec<usize>> = None;
            while self.peek() != Some(&Tok::RBracket) {
                if rows > 0 {
                    self.expect(&Tok::Comma, "`,` or `]`")?;
                    if self.peek() == Some(&Tok::RBracket) {
                        break;
                    }
                }
                let item_start = self.span();
                let shape = self.literal_item(values)?;
                match &row_shape {
                    None => row_shape = Some(shape),
                    Some(first) if *first != shape => {
                        let item = item_start.to(self.prev_span());
                        let literal = start.to(self.rest_of_literal());
                        return Err(Diagnostic::error(
                            codes::SYNTAX,
                            item,
                            "ragged literal: every row must have the same shape",
                        )
                        .with_secondary(literal, "in this literal"));
                    }
                    _ => {}
                }
                rows += 1;
            }
            self.expect(&Tok::RBracket, "`,` or `]`")?;
            let mut shape = vec![rows];
            shape.extend(row_shape.unwrap_or_default());
            return Ok(shape);
        }
        let neg = self.eat(&Tok::Minus);
        match self.bump() {
            Some((Tok::Number(n), _)) => {
                values.push(if neg { -n.value } else { n.value });
                Ok(Vec::new())
            }
            _ => {
                self.pos -= 1;
                Err(self.unexpected("a number or `[`"))
            }
        }
    }

    fn declaration(&mut self) -> PResult<StmtKind> {
        let name = self.name("a name")?;
        self.expect(&Tok::Colon, "`:`")?;
        match self.peek().cloned() {
            Some(Tok::Number(n)) => {
                self.pos += 1;
                let size = as_size(n).ok_or_else(|| {
                    Diagnostic::error(
                        codes::SYNTAX,
                        self.prev_span(),
                        "a domain size must be a non-negative integer",
                    )
                })?;
                Ok(StmtKind::Domain {
                    name,
                    def: DomainDef::Size(size),
                })
            }
            Some(Tok::LBrace) => {
                self.pos += 1;
                let mut symbols = Vec::new();
                while self.peek() != Some(&Tok::RBrace) {
                    match self.bump() {
                        Some((Tok::Ident(text), span)) | Some((Tok::Str(text), span)) => symbols
                            .push(Name {
                                text: text.into(),
                                span,
                            }),
                        Some((Tok::Number(n), span)) if n.is_int => symbols.push(Name {
                            text: format!("{}", n.value),
                            span,
                        }),
                        _ => {
                            self.pos = self.pos.saturating_sub(1);
                            return Err(self.unexpected("a symbol"));
                        }
                    }
                    if !self.eat(&Tok::Comma) {
                        break;
                    }
                }
                self.expect(&Tok::RBrace, "`,` or `}`")?;
                Ok(StmtKind::Domain {
                    name,
                    def: DomainDef::Symbols(symbols),
                })
            }
            Some(Tok::Ident(_)) => {
                let ty = self.name("a type")?;
                let mut dims = Vec::new();
                if self.eat(&Tok::LBracket) {
                    loop {
                        match self.bump() {
                            Some((Tok::Ident(text), span)) => dims.push(Dim::Named(Name {
                                text: text.into(),
                                span,
                            })),
                            Some((Tok::Number(n), span)) => match as_size(n) {
                                Some(size) => dims.push(Dim::Size(size, span)),
                                None => {
                                    return Err(Diagnostic::error(
                                        codes::SYNTAX,
                                        span,
                                        "an extent must be a non-negative integer",
                                    ))
                                }
                            },
                            _ => {
                                self.pos = self.pos.saturating_sub(1);
                                return Err(self.unexpected("a domain name or an extent"));
                            }
                        }
                        if !self.eat(&Tok::Comma) {
                            break;
                        }
                    }
                    self.expect(&Tok::RBracket, "`,` or `]`")?;
                }
                Ok(StmtKind::Declaration { name, ty, dims })
            }
            _ => Err(self.unexpected("a type, a size or `{`")),
        }
    }

    fn init(&mut self) -> PResult<StmtKind> {
        let name = self.name("a name")?;
        self.expect(&Tok::Tilde, "`~`")?;
        let dist = self.name("a distribution")?;
        let mut args = Vec::new();
        if self.eat(&Tok::LParen) {
            loop {
                args.push(self.sum()?);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(&Tok::RParen, "`,` or `)`")?;
        }
        Ok(StmtKind::Init { name, dist, args })
    }

    fn access(&mut self) -> PResult<Access> {
        let name = self.name("a tensor name")?;
        let (brackets, close) = match self.peek() {
            Some(Tok::LBracket) => (Brackets::Square, Tok::RBracket),
            Some(Tok::LParen) => (Brackets::Paren, Tok::RParen),
            _ => {
                return Ok(Access {
                    span: name.span,
                    name,
                    brackets: Brackets::None,
                    indices: Vec::new(),
                })
            }
        };
        self.pos += 1;
        let mut indices = Vec::new();
        if self.peek() != Some(&close) {
            indices.push(self.index()?);
            while self.eat(&Tok::Comma) {
                indices.push(self.index()?);
            }
        }
        let end = self.expect(
            &close,
            if close == Tok::RBracket {
                "`,` or `]`"
            } else {
                "`,` or `)`"
            },
        )?;
        Ok(Access {
            span: name.span.to(end),
            name,
            brackets,
            indices,
        })
    }

    fn index(&mut self) -> PResult<Index> {
        let start = self.span();
        if self.eat(&Tok::Star) {
            let inner = self.iarith()?;
            return Ok(Index::Virtual(Box::new(inner), start.to(self.prev_span())));
        }
        if self.peek() == Some(&Tok::Colon) {
            self.pos += 1;
            let hi = self.slice_bound()?;
            return Ok(Index::Slice(None, hi, start.to(self.prev_span())));
        }
        let first = self.iarith()?;
        if self.eat(&Tok::Colon) {
            let lo = match first {
                Index::Int(v, _) => v,
                _ => {
                    return Err(Diagnostic::error(
                        codes::SYNTAX,
                        first.span(),
                        "slice bounds must be integers",
                    ))
                }
            };
            let hi = self.slice_bound()?;
            return Ok(Index::Slice(Some(lo), hi, start.to(self.prev_span())));
        }
        if let Index::Name(n) = &first {
            if self.peek() == Some(&Tok::Dot) {
                self.pos += 1;
                return Ok(Index::Normalized(n.clone()));
            }
        }
        Ok(first)
    }

    fn slice_bound(&mut self) -> PResult<Option<i64>> {
        match self.peek().cloned() {
            Some(Tok::Number(n)) if n.is_int => {
                self.pos += 1;
                index_constant(n.int).map(Some).ok_or_else(|| {
                    Diagnostic::error(codes::SYNTAX, self.prev_span(), "slice bound out of range")
                })
            }
            Some(Tok::Comma | Tok::RBracket) => Ok(None),
            _ => Err(self.unexpected("an integer slice bound")),
        }
    }

    fn iarith(&mut self) -> PResult<Index> {
        self.index_chain(Self::iterm, |t| match t {
            Tok::Plus => Some(ArithOp::Add),
            Tok::Minus => Some(ArithOp::Sub),
            _ => None,
        })
    }

    fn iterm(&mut self) -> PResult<Index> {
        self.index_chain(Self::iatom, |t| match t {
            Tok::Star => Some(ArithOp::Mul),
            Tok::Slash => Some(ArithOp::Div),
            Tok::Percent => Some(ArithOp::Rem),
            _ => None,
        })
    }

    /// A left-associative chain `operand (op operand)*` of index arithmetic.
    fn index_chain(
        &mut self,
        operand: fn(&mut Self) -> PResult<Index>,
        op_of: fn(&Tok) -> Option<ArithOp>,
    ) -> PResult<Index> {
        let mut lhs = operand(self)?;
        for _ in 0..MAX_TERMS {
            let Some(op) = self.peek().and_then(op_of) else {
                return Ok(lhs);
            };
            self.pos += 1;
            let rhs = operand(self)?;
            let span = lhs.span().to(rhs.span());
            lhs = Index::Arith(Box::new(lhs), op, Box::new(rhs), span);
        }
        Err(Diagnostic::error(
            codes::SYNTAX,
            self.span(),
            "index expression too long",
        ))
    }

    fn iatom(&mut self) -> PResult<Index> {
        self.enter()?;
        let r = self.iatom_inner();
        self.depth -= 1;
        r
    }

    fn iatom_inner(&mut self) -> PResult<Index> {
        let start = self.span();
        match self.bump() {
            Some((Tok::Ident(text), _))
                if self.peek() == Some(&Tok::LParen) && (self.functions.in_index)(&text) =>
            {
                self.pos -= 1;
                let call = self.call()?;
                let var = Name {
                    text: format!("{CALL_VARIABLE}{}", self.index_calls.len()),
                    span: call.span(),
                };
                self.index_calls.push((var.clone(), call));
                Ok(Index::Name(var))
            }
            Some((Tok::Ident(text), span)) => Ok(Index::Name(Name {
                text: text.into(),
                span,
            })),
            Some((Tok::Number(n), span)) if n.is_int => match index_constant(n.int) {
                Some(v) => Ok(Index::Int(v, span)),
                None => Err(out_of_range(span)),
            },
            Some((Tok::Number(n), span)) if n.value.is_finite() => Ok(Index::Real(n.value, span)),
            Some((Tok::Str(s), span)) => Ok(Index::Str(s.into(), span)),
            Some((Tok::Minus, _)) => {
                // `-9223372036854775808` is an i64 whose magnitude is not.
                if let Some(Tok::Number(Number { int: Some(v), .. })) = self.peek().cloned() {
                    self.pos += 1;
                    let span = start.to(self.prev_span());
                    return match index_constant(Some(-v)) {
                        Some(v) => Ok(Index::Int(v, span)),
                        None => Err(out_of_range(span)),
                    };
                }
                let inner = self.iatom()?;
                let span = start.to(inner.span());
                if let Index::Real(v, _) = inner {
                    return Ok(Index::Real(-v, span));
                }
                Ok(Index::Arith(
                    Box::new(Index::Int(0, start)),
                    ArithOp::Sub,
                    Box::new(inner),
                    span,
                ))
            }
            Some((Tok::LParen, _)) => {
                let inner = self.iarith()?;
                self.expect(&Tok::RParen, "`)`")?;
                Ok(inner)
            }
            _ => {
                self.pos = self.pos.saturating_sub(1);
                Err(self.unexpected("an index (a variable, a number or a symbol)"))
            }
        }
    }

    /// A rule body's literal: as [`Self::cmp`], where `=` also means `==` (Soufflé's
    /// equality, which binds a variable no atom binds).
    fn body_literal(&mut self) -> PResult<Expr> {
        let lhs = self.cmp()?;
        if matches!(lhs, Expr::Compare(..)) || !self.eat(&Tok::Assign) {
            return Ok(lhs);
        }
        let rhs = self.sum()?;
        let span = lhs.span().to(rhs.span());
        Ok(Expr::Compare(CmpOp::Eq, Box::new(lhs), Box::new(rhs), span))
    }

    fn cmp(&mut self) -> PResult<Expr> {
        let lhs = self.sum()?;
        let op = match self.peek() {
            Some(Tok::EqEq) => CmpOp::Eq,
            Some(Tok::NotEq) => CmpOp::Ne,
            Some(Tok::Lt) => CmpOp::Lt,
            Some(Tok::Le) => CmpOp::Le,
            Some(Tok::Gt) => CmpOp::Gt,
            Some(Tok::Ge) => CmpOp::Ge,
            _ => return Ok(lhs),
        };
        self.pos += 1;
        let rhs = self.sum()?;
        let span = lhs.span().to(rhs.span());
        Ok(Expr::Compare(op, Box::new(lhs), Box::new(rhs), span))
    }

    fn sum(&mut self) -> PResult<Expr> {
        let mut lhs = self.term()?;
        let mut operands = 1;
        loop {
            if operands > MAX_TERMS {
                return Err(Diagnostic::error(
                    codes::SYNTAX,
                    self.span(),
                    format!("more than {MAX_TERMS} terms in one sum"),
                )
                .with_note(
                    "split it into several equations for the same tensor: they are added (§7)",
                ));
            }
            operands += 1;
            let op = match self.peek() {
                Some(Tok::Plus) => BinOp::Add,
                Some(Tok::Minus) => BinOp::Sub,
                _ => return Ok(lhs),
            };
            self.pos += 1;
            let rhs = self.term()?;
            let span = lhs.span().to(rhs.span());
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs), span);
        }
    }

    fn starts_factor(&self) -> bool {
        matches!(
            self.peek(),
            Some(Tok::Ident(_) | Tok::Number(_) | Tok::LParen | Tok::Str(_) | Tok::Not)
        )
    }

    fn term(&mut self) -> PResult<Expr> {
        let first = self.factor()?;
        let mut span = first.span();
        let mut factors = vec![(false, first)];
        loop {
            let divide = match self.peek() {
                Some(Tok::Star) => {
                    self.pos += 1;
                    false
                }
                Some(Tok::Slash) => {
                    self.pos += 1;
                    true
                }
                Some(Tok::Percent) => {
                    // `a b % c d` is `((a b) % c) d`: the remainder takes the product so far.
                    self.pos += 1;
                    let divisor = self.factor()?;
                    let dividend = match factors.len() {
                        1 => factors.remove(0).1,
                        _ => Expr::Term(std::mem::take(&mut factors), span),
                    };
                    span = span.to(divisor.span());
                    let rem = Expr::Binary(BinOp::Rem, Box::new(dividend), Box::new(divisor), span);
                    factors.push((false, rem));
                    continue;
                }
                _ if self.starts_factor() => false,
                _ => break,
            };
            let f = self.factor()?;
            span = span.to(f.span());
            factors.push((divide, f));
        }
        Ok(Expr::Term(factors, span))
    }

    fn factor(&mut self) -> PResult<Expr> {
        self.enter()?;
        let r = self.factor_inner();
        self.depth -= 1;
        r
    }

    fn enter(&mut self) -> PResult<()> {
        if self.depth >= MAX_DEPTH {
            self.too_deep += 1;
            return Err(Diagnostic::error(
                codes::SYNTAX,
                self.span(),
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        Ok(())
    }

    fn factor_inner(&mut self) -> PResult<Expr> {
        let start = self.span();
        if self.eat(&Tok::Minus) {
            let inner = self.factor()?;
            let span = start.to(inner.span());
            return Ok(Expr::Neg(Box::new(inner), span));
        }
        if self.eat(&Tok::Not) {
            let inner = self.factor()?;
            let span = start.to(inner.span());
            return Ok(Expr::Not(Box::new(inner), span));
        }
        let base = self.primary()?;
        if self.eat(&Tok::Caret) {
            let exp = self.factor()?;
            let span = base.span().to(exp.span());
            return Ok(Expr::Binary(
                BinOp::Pow,
                Box::new(base),
                Box::new(exp),
                span,
            ));
        }
        Ok(base)
    }

    fn peek_at_from(&self, at: usize, k: usize) -> Option<&Tok> {
        self.tokens.get(at + k).map(|t| &t.tok)
    }

    fn call(&mut self) -> PResult<Expr> {
        let func = self.name("a function")?;
        self.expect(&Tok::LParen, "`(`")?;
        let mut args = vec![self.cmp()?];
        while self.eat(&Tok::Comma) {
            args.push(self.cmp()?);
        }
        let end = self.expect(&Tok::RParen, "`,` or `)`")?;
        Ok(Expr::Call {
            span: func.span.to(end),
            func,
            args,
        })
    }

    fn primary(&mut self) -> PResult<Expr> {
        match self.peek().cloned() {
            Some(Tok::Number(n)) => {
                self.pos += 1;
                let exact = n.int.and_then(|v| i64::try_from(v).ok());
                let num = exact.map_or(Num::Real(n.value), Num::Int);
                Ok(Expr::Number(num, self.prev_span()))
            }
            Some(Tok::Str(s)) => {
                self.pos += 1;
                Ok(Expr::Str(s.into(), self.prev_span()))
            }
            Some(Tok::LParen) => {
                self.pos += 1;
                let inner = self.cmp()?;
                self.expect(&Tok::RParen, "`)`")?;
                Ok(inner)
            }
            Some(Tok::Ident(text)) => {
                if (self.functions.call)(&text) && self.peek_at(1) == Some(&Tok::LParen) {
                    return self.call();
                }
                let start = self.pos;
                if let Some(f) = self.failed.get(&start).filter(|f| self.depth >= f.from) {
                    self.pos = f.end;
                    return Err(f.error.clone());
                }
                let too_deep = self.too_deep;
                let parsed = match self.access() {
                    Ok(a) => Ok(Expr::Access(a)),
                    Err(e) if self.peek_at_from(start, 1) == Some(&Tok::LParen) => {
                        // `f(expr)` with an unknown `f`: parse it as a call so that checking
                        // reports the unknown function rather than a syntax error.
                        self.pos = start;
                        self.call().map_err(|_| e)
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = &parsed {
                    let from = if self.too_deep > too_deep {
                        self.depth
                    } else {
                        0
                    };
                    let (error, end) = (e.clone(), self.pos);
                    self.failed.insert(start, Failed { error, end, from });
                }
                parsed
            }
            _ => Err(self.unexpected("an expression")),
        }
    }
}

/// An integer written in an index position (a position, or a value of a column), if it is
/// an i64 (§8).
fn index_constant(n: Option<i128>) -> Option<i64> {
    i64::try_from(n?).ok()
}

/// E0001 for an index constant outside the i64 range.
fn out_of_range(span: Span) -> Diagnostic {
    Diagnostic::error(codes::SYNTAX, span, "index constant out of range").with_note(
        "integers in indices are i64 values, -9223372036854775808 to 9223372036854775807",
    )
}

fn as_size(n: Number) -> Option<usize> {
    (n.is_int && n.value >= 0.0 && n.value < 1e15).then_some(n.value as usize)
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => s.to_string(),
        Tok::Number(n) => format!("{}", n.value),
        Tok::Str(s) => format!("\"{s}\""),
        other => {
            let s = format!("{other:?}");
            match other {
                Tok::Dot => ".".into(),
                Tok::Comma => ",".into(),
                Tok::LParen => "(".into(),
                Tok::RParen => ")".into(),
                Tok::LBracket => "[".into(),
                Tok::RBracket => "]".into(),
                Tok::LBrace => "{".into(),
                Tok::RBrace => "}".into(),
                Tok::Arrow => ":-".into(),
                Tok::Colon => ":".into(),
                Tok::Question => "?".into(),
                Tok::Tilde => "~".into(),
                Tok::Assign => "=".into(),
                Tok::PlusAssign => "+=".into(),
                Tok::MaxAssign => "max=".into(),
                Tok::MinAssign => "min=".into(),
                Tok::AvgAssign => "avg=".into(),
                Tok::EqEq => "==".into(),
                Tok::NotEq => "!=".into(),
                Tok::Lt => "<".into(),
                Tok::Le => "<=".into(),
                Tok::Gt => ">".into(),
                Tok::Ge => ">=".into(),
                Tok::Plus => "+".into(),
                Tok::Minus => "-".into(),
                Tok::Star => "*".into(),
                Tok::Slash => "/".into(),
                Tok::Caret => "^".into(),
                Tok::Percent => "%".into(),
                Tok::Not => "not".into(),
                Tok::Semi => ";".into(),
                _ => s,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// No function at all.
    const NONE: Functions<'static> = Functions {
        call: &|_| false,
        in_index: &|_| false,
    };
    use super::*;

    fn parse_ok(src: &str) -> Program {
        let (p, errs) = parse(src, crate::functions::BUILTINS);
        assert!(errs.is_empty(), "{errs:?}");
        p
    }

    #[test]
    fn statement_forms() {
        let p = parse_ok(
            "Parent(Ann, Bob). Parent(Bob, Cid).\nW = [[1,2],[3,4]]\nS = -2\nH : 64\nP : {A, B}\n\
             W1 : real[H, 3]\nW1 ~ normal(0, 0.1)\nE = \"e.tsv\"\n\"o.tsv\" = E\nY?\n\
             A(x,z) :- P(x,y), not Q(y), x != z.\nY[i] max= A[i,j]",
        );
        let kinds: Vec<_> = p
            .statements
            .iter()
            .map(|s| std::mem::discriminant(&s.kind))
            .collect();
        assert_eq!(kinds.len(), 13);
        assert!(matches!(p.statements[3].kind, StmtKind::Scalar { value, .. } if value == -2.0));
        assert!(matches!(
            p.statements[12].kind,
            StmtKind::Equation {
                op: AccumOp::Max,
                ..
            }
        ));
    }

    #[test]
    fn juxtaposition_and_division_form_one_term() {
        let p = parse_ok("C[p, q.] = softmax(Q[p, d] K[q, d] / sqrt(D))");
        let StmtKind::Equation { rhs, lhs, .. } = &p.statements[0].kind else {
            panic!()
        };
        assert!(matches!(lhs.indices[1], Index::Normalized(_)));
        let Expr::Term(f, _) = rhs else { panic!() };
        let Expr::Call { args, .. } = &f[0].1 else {
            panic!()
        };
        let Expr::Term(inner, _) = &args[0] else {
            panic!()
        };
        assert_eq!(inner.len(), 3);
        assert!(inner[2].0);
    }

    #[test]
    fn negation_binds_looser_than_power() {
        let p = parse_ok("Y = -X^2");
        let StmtKind::Equation { rhs, .. } = &p.statements[0].kind else {
            panic!()
        };
        let Expr::Term(f, _) = rhs else { panic!() };
        assert!(
            matches!(&f[0].1, Expr::Neg(inner, _) if matches!(**inner, Expr::Binary(BinOp::Pow, ..)))
        );
    }

    #[test]
    fn all_errors_are_reported() {
        let (_, errs) = parse("A = [1, 2\nB[i] = A[i] +* 2\nC = )\n", NONE);
        assert_eq!(errs.len(), 3, "{errs:?}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let src = format!("Y = {}1{}", "(".repeat(100_000), ")".repeat(100_000));
        let (_, errs) = parse(&src, NONE);
        assert!(errs[0].message.contains("nesting"));
        let src = format!("Y = {}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(!parse(&src, NONE).1.is_empty());
        let src = format!("Y = {}", vec!["A"; 100_000].join(" + "));
        assert!(parse(&src, NONE).1[0].message.contains("terms"));
        let src = format!("Y[i{}] = 1", "+1".repeat(100_000));
        assert!(!parse(&src, NONE).1.is_empty());
        let src = format!("Y[{}i{}] = 1", "(".repeat(100_000), ")".repeat(100_000));
        assert!(!parse(&src, NONE).1.is_empty());
    }

    #[test]
    fn virtual_and_arith_indices() {
        let p = parse_ok("S[i, *t + 1] = tanh(W[i, j] S[j, *t] + U[i, t - 1] X[x / 2])");
        let StmtKind::Equation { lhs, .. } = &p.statements[0].kind else {
            panic!()
        };
        assert!(matches!(lhs.indices[1], Index::Virtual(..)));
    }
}

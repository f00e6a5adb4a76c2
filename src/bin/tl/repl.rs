//! `tl repl [FILE]`: a program typed a line at a time. Each statement is checked with the
//! program so far and kept only if the whole still checks; each query (a line ending in `?`)
//! is answered at once by running the program so far. Errors are printed and the session
//! goes on.

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;
use std::path::{Path, PathBuf};
use tensor_logic::{RunOptions, Session};

const HELP: &str = "\
Type statements (`Parent(Alice, Bob).`, `Ancestor(x, y) :- Parent(x, y).`, `H[i] = W[i, j] X[j]`)
and queries (`Ancestor(Alice, x)?`). A statement is kept when the program still checks.
  :explain      print the plan of the program so far
  :why ATOM     why a fact holds or an element has its value (`:why not ATOM`: why it fails)
  :load FILE    add a file's statements (its folder resolves the files it names)
  :reset        forget every statement
  :help         this text
  :quit         leave (or Ctrl-D)
";

/// The program typed so far and, while it is unchanged, the session that last ran it.
struct Repl {
    source: String,
    base_dir: PathBuf,
    options: RunOptions,
    ran: Option<Session>,
}

/// What one line asked for.
enum Step {
    Go,
    Quit,
}

impl Repl {
    /// The session of `source`, checked; `Err` holds the rendered diagnostics.
    fn checked(&self, source: &str) -> Result<Session, String> {
        let mut s = Session::new();
        let render = |s: &Session, d: &tensor_logic::Diagnostics| {
            let (name, src) = s.source();
            d.render(name, src)
        };
        s.load_source("<repl>", source, &self.base_dir)
            .map_err(|d| render(&s, &d))?;
        if let Err(d) = s.check(&self.options.settings) {
            return Err(render(&s, &d));
        }
        Ok(s)
    }

    /// Keeps `text` as more of the program if the whole still checks.
    fn add(&mut self, text: &str) -> Result<(), String> {
        let candidate = format!("{}{}\n", self.source, text.trim_end());
        self.checked(&candidate)?;
        self.source = candidate;
        self.ran = None;
        Ok(())
    }

    fn answer(&mut self, query: &str) -> Result<Vec<String>, String> {
        let s = self.ran()?;
        s.query(query).map_err(|d| d.render("<query>", query))
    }

    /// `:why ATOM` and `:why not ATOM`, on the program so far.
    fn why(&mut self, rest: &str) -> Result<String, String> {
        let (not, atom) = match rest.trim().strip_prefix("not ") {
            Some(atom) => (true, atom.trim()),
            None => (false, rest.trim()),
        };
        let atom = atom.trim_end_matches('?');
        let options = tensor_logic::why::WhyOptions {
            not,
            ..Default::default()
        };
        let s = self.ran()?;
        let tree = s.why(atom, &options).map_err(|d| d.render("<why>", atom))?;
        Ok(tree.text())
    }

    /// The session that ran the program so far, running it if it has changed.
    fn ran(&mut self) -> Result<&Session, String> {
        if self.ran.is_none() {
            let mut s = self.checked(&self.source)?;
            if let Err(d) = s.run(&self.options) {
                let (name, src) = s.source();
                return Err(d.render(name, src));
            }
            self.ran = Some(s);
        }
        self.ran
            .as_ref()
            .ok_or_else(|| "the program did not run".to_string())
    }

    fn line(&mut self, line: &str) -> Result<Step, String> {
        let line = line.trim();
        let (command, rest) = line.split_once(' ').unwrap_or((line, ""));
        match command {
            "" => {}
            ":quit" | ":q" | ":exit" => return Ok(Step::Quit),
            ":help" | ":h" => print!("{HELP}"),
            ":reset" => {
                self.source.clear();
                self.ran = None;
            }
            ":explain" => {
                let s = self.checked(&self.source)?;
                print!("{}", s.explain().unwrap_or_default());
            }
            ":why" => print!("{}", self.why(rest)?),
            ":load" => {
                let path = Path::new(rest.trim());
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read `{}`: {e}\n", path.display()))?;
                let before = self.base_dir.clone();
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    self.base_dir = dir.to_path_buf();
                }
                if let Err(e) = self.add(&text) {
                    self.base_dir = before;
                    return Err(e);
                }
            }
            c if c.starts_with(':') => {
                return Err(format!("unknown command `{c}`: `:help` lists them\n"));
            }
            _ if line.ends_with('?') => {
                for answer in self.answer(line)? {
                    println!("{answer}");
                }
            }
            _ => self.add(line).map_err(|e| self.hint_query(line, e))?,
        }
        Ok(Step::Go)
    }

    /// `e`, with a hint when `line` is not a statement but would be a query with a `?`
    /// (`Ancestor(Alice, x)` typed to ask).
    fn hint_query(&self, line: &str, e: String) -> String {
        let asked = format!("{}{line}?\n", self.source);
        match self.checked(&asked) {
            Ok(_) => format!("{e}hint: to ask, end the line with `?`: `{line}?`\n"),
            Err(_) => e,
        }
    }
}

/// Runs the loop until `:quit` or the end of input; `file`, if given, is loaded first.
pub fn repl(file: Option<PathBuf>, options: RunOptions) -> Result<(), String> {
    let mut repl = Repl {
        source: String::new(),
        base_dir: PathBuf::from("."),
        options,
        ran: None,
    };
    if let Some(f) = file {
        if let Err(e) = repl.line(&format!(":load {}", f.display())) {
            eprint!("{e}");
        }
    }
    let mut editor = DefaultEditor::new().map_err(|e| format!("cannot read input: {e}\n"))?;
    loop {
        match editor.readline("tl> ") {
            Ok(line) => {
                let _ = editor.add_history_entry(line.as_str());
                match repl.line(&line) {
                    Ok(Step::Quit) => return Ok(()),
                    Ok(Step::Go) => {}
                    Err(e) => eprint!("{e}"),
                }
            }
            // Ctrl-C abandons the line being typed, as in a shell.
            Err(ReadlineError::Interrupted) => {}
            Err(ReadlineError::Eof) => return Ok(()),
            Err(e) => return Err(format!("cannot read input: {e}\n")),
        }
    }
}

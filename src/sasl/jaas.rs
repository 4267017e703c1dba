//! The JAAS login configuration file ZooKeeper's start scripts pass as
//! `-Djava.security.auth.login.config=`: named sections, each a list of login modules with a
//! flag and `key=value` options, in Java's `ConfigFile` syntax (`//`, `/* */` and `#`
//! comments, quoted or bare values, `;` after each module and each section).

use std::fmt;

/// One login module entry of a section.
#[derive(Clone, PartialEq, Eq)]
pub struct Module {
    /// The module's class, e.g. `org.apache.zookeeper.server.auth.DigestLoginModule`.
    pub class: String,
    /// `required`, `requisite`, `sufficient` or `optional`.
    pub flag: String,
    /// The options in file order.
    pub options: Vec<(String, String)>,
}

impl fmt::Debug for Module {
    // Options hold passwords: print their keys only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("class", &self.class)
            .field("flag", &self.flag)
            .field("options", &self.options.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

/// A whole file: its sections by name, in file order.
#[derive(Debug, Clone, Default)]
pub struct Jaas {
    pub sections: Vec<(String, Vec<Module>)>,
}

impl Jaas {
    /// The section `name`'s modules, if the file has it.
    pub fn section(&self, name: &str) -> Option<&[Module]> {
        self.sections.iter().find(|(n, _)| n == name).map(|(_, m)| m.as_slice())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Open,
    Close,
    Semi,
    Equals,
}

/// Splits the text into tokens, each with its 1-based line.
fn tokens(text: &str) -> Result<Vec<(Token, usize)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let start = line;
                let mut prev = ' ';
                loop {
                    match chars.next() {
                        None => return Err(format!("line {start}: a /* comment is never closed")),
                        Some('/') if prev == '*' => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            prev = c;
                        }
                    }
                }
            }
            '{' => out.push((Token::Open, line)),
            '}' => out.push((Token::Close, line)),
            ';' => out.push((Token::Semi, line)),
            '=' => out.push((Token::Equals, line)),
            '"' | '\'' => {
                let start = line;
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err(format!("line {start}: a quoted value is never closed")),
                        Some(q) if q == c => break,
                        Some('\\') => match chars.next() {
                            Some('n') => s.push('\n'),
                            Some('t') => s.push('\t'),
                            Some(other) => s.push(other),
                            None => return Err(format!("line {start}: a quoted value is never closed")),
                        },
                        Some(ch) => {
                            if ch == '\n' {
                                line += 1;
                            }
                            s.push(ch);
                        }
                    }
                }
                out.push((Token::Quoted(s), line));
            }
            c => {
                let mut s = String::from(c);
                while let Some(&n) = chars.peek() {
                    if n.is_whitespace() || matches!(n, '{' | '}' | ';' | '=' | '"' | '\'') {
                        break;
                    }
                    s.push(n);
                    chars.next();
                }
                out.push((Token::Word(s), line));
            }
        }
    }
    Ok(out)
}

/// Reads and parses the JAAS file at `path`; the error names the file (and the line).
pub fn read(path: &std::path::Path) -> Result<Jaas, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses a JAAS file's text. The error names the line.
pub fn parse(text: &str) -> Result<Jaas, String> {
    let toks = tokens(text)?;
    let mut it = toks.into_iter().peekable();
    let mut jaas = Jaas::default();
    let last_line = text.lines().count().max(1);
    let mut next = |what: &str| -> Result<(Token, usize), String> {
        it.next().ok_or_else(|| format!("line {last_line}: the file ends where {what} should be"))
    };
    loop {
        let (name, line) = match next("a section name") {
            Ok((Token::Word(n), l)) => (n, l),
            Ok((t, l)) => return Err(format!("line {l}: expected a section name, found {t:?}")),
            Err(_) => break,
        };
        if jaas.sections.iter().any(|(n, _)| *n == name) {
            return Err(format!("line {line}: section {name} appears twice"));
        }
        match next("`{`")? {
            (Token::Open, _) => {}
            (t, l) => return Err(format!("line {l}: expected `{{` after {name}, found {t:?}")),
        }
        let mut modules = Vec::new();
        loop {
            let class = match next("a login module or `}`")? {
                (Token::Close, _) => break,
                (Token::Word(w), _) => w,
                (t, l) => return Err(format!("line {l}: expected a login module class, found {t:?}")),
            };
            let flag = match next("the module's flag")? {
                (Token::Word(w), l) => {
                    let f = w.to_ascii_lowercase();
                    if !matches!(f.as_str(), "required" | "requisite" | "sufficient" | "optional") {
                        return Err(format!(
                            "line {l}: {class}'s flag must be required, requisite, sufficient or optional, not {w}"
                        ));
                    }
                    f
                }
                (t, l) => return Err(format!("line {l}: expected {class}'s flag, found {t:?}")),
            };
            let mut options = Vec::new();
            loop {
                match next("an option or `;`")? {
                    (Token::Semi, _) => break,
                    (Token::Word(key), l) => {
                        match next("`=`")? {
                            (Token::Equals, _) => {}
                            (t, l2) => return Err(format!("line {l2}: expected `=` after {key}, found {t:?}")),
                        }
                        let value = match next("a value")? {
                            (Token::Word(v) | Token::Quoted(v), _) => v,
                            (t, l3) => return Err(format!("line {l3}: expected a value for {key}, found {t:?}")),
                        };
                        if options.iter().any(|(k, _): &(String, String)| *k == key) {
                            return Err(format!("line {l}: option {key} appears twice in {class}"));
                        }
                        options.push((key, value));
                    }
                    (t, l) => return Err(format!("line {l}: expected an option of {class} or `;`, found {t:?}")),
                }
            }
            modules.push(Module { class, flag, options });
        }
        match next("`;` after the section") {
            Ok((Token::Semi, _)) => {}
            Ok((t, l)) => return Err(format!("line {l}: expected `;` after section {name}, found {t:?}")),
            Err(e) => return Err(e),
        }
        jaas.sections.push((name, modules));
    }
    Ok(jaas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_zookeepers_documented_server_section() {
        let text = r#"
            // the server's users
            Server {
                   org.apache.zookeeper.server.auth.DigestLoginModule required
                   user_super="adminsecret"
                   user_bob="bob\"secret";
            };
            /* the client side,
               for zkCli */
            Client {
              org.apache.zookeeper.server.auth.DigestLoginModule required username=bob password='x y';
            };
        "#;
        let j = parse(text).unwrap();
        let s = j.section("Server").unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].class, "org.apache.zookeeper.server.auth.DigestLoginModule");
        assert_eq!(s[0].flag, "required");
        assert_eq!(
            s[0].options,
            vec![("user_super".into(), "adminsecret".into()), ("user_bob".into(), "bob\"secret".into())]
        );
        let c = j.section("Client").unwrap();
        assert_eq!(c[0].options[1], ("password".into(), "x y".into()));
        assert!(j.section("QuorumServer").is_none());
        // Debug never shows a password.
        assert!(!format!("{j:?}").contains("adminsecret"));
    }

    #[test]
    fn bad_files_name_the_line() {
        for (text, want) in [
            ("Server {\n m required a=\"b\"\n", "line 2: the file ends"),
            ("Server {\n m mandatory;\n};", "line 2: m's flag"),
            ("Server {\n m required a b;\n};", "line 2: expected `=` after a"),
            ("Server {\n m required;\n}\n", "the file ends where `;` after the section"),
            ("Server { m required; };\nServer { m required; };", "line 2: section Server appears twice"),
            ("Server { m required a=1 a=2; };", "option a appears twice"),
            ("/* never closed\nServer {", "line 1: a /* comment is never closed"),
            ("Server { m required a=\"b; };", "never closed"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        assert!(parse("").unwrap().sections.is_empty());
    }
}

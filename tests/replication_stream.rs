//! The replication stream itself, read as a replica reads it (`PSYNC` on a raw connection): an
//! admit sends exactly `RL.SETSTATE key <effect>` (the state and the key's absolute expiry in one
//! argument, `[0xE5][unix-ms u64 LE][state]`); a denial, a peek, a lease that
//! grants nothing and a refund to a missing key send nothing. A `SET` after each step marks where the step's effects end.

mod support;
use support::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A connection that has asked the master for its stream and read past the initial RDB.
struct Stream(BufReader<TcpStream>);

impl Stream {
    fn open(port: u16) -> Stream {
        let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        // A bound on a broken stream, so the test fails instead of hanging; no assertion is
        // about time.
        tcp.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("read timeout");
        let mut stream = Stream(BufReader::new(tcp));
        // No `capa eof`: the master then sends the RDB as one `$<len>` bulk.
        stream.send(&["REPLCONF", "listening-port", "0"]);
        assert_eq!(stream.line(), "+OK");
        stream.send(&["PSYNC", "?", "-1"]);
        let reply = stream.line();
        assert!(reply.starts_with("+FULLRESYNC "), "{reply}");
        // The master may send newlines while it prepares the RDB.
        let mut header = stream.line();
        while header.is_empty() {
            header = stream.line();
        }
        let len: usize = header
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("RDB header {header:?}"));
        let mut rdb = vec![0; len];
        stream.0.read_exact(&mut rdb).expect("RDB");
        assert!(rdb.starts_with(b"REDIS"), "not an RDB");
        stream
    }

    fn send(&mut self, words: &[&str]) {
        let mut out = format!("*{}\r\n", words.len());
        for w in words {
            out += &format!("${}\r\n{w}\r\n", w.len());
        }
        self.0.get_mut().write_all(out.as_bytes()).expect("write");
    }

    /// One line, without its CRLF.
    fn line(&mut self) -> String {
        let mut line = String::new();
        self.0.read_line(&mut line).expect("read line");
        assert!(!line.is_empty(), "the master closed the stream");
        line.trim_end_matches(['\r', '\n']).to_string()
    }

    /// The next command of the stream: an array of bulk strings.
    fn command(&mut self) -> Vec<Vec<u8>> {
        let header = self.line();
        let n: usize = header
            .strip_prefix('*')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a command: {header:?}"));
        (0..n)
            .map(|_| {
                let bulk = self.line();
                let len: usize = bulk
                    .strip_prefix('$')
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("not a bulk string: {bulk:?}"));
                let mut data = vec![0; len + 2];
                self.0.read_exact(&mut data).expect("bulk");
                data.truncate(len);
                data
            })
            .collect()
    }

    /// The commands up to the marker `SET <marker> 1`, without the marker and without the
    /// master's periodic `PING`s.
    fn until_marker(&mut self, marker: &str) -> Vec<Vec<Vec<u8>>> {
        let mut commands = Vec::new();
        loop {
            let command = self.command();
            if command == words(&["SET", marker, "1"]) {
                return commands;
            }
            if command != words(&["PING"]) {
                commands.push(command);
            }
        }
    }
}

fn words(w: &[&str]) -> Vec<Vec<u8>> {
    w.iter().map(|w| w.as_bytes().to_vec()).collect()
}

fn text(command: &[Vec<u8>]) -> Vec<String> {
    command
        .iter()
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

#[test]
fn an_admit_sends_its_state_and_a_denial_or_a_peek_sends_nothing() {
    let (s, mut c) = server();
    let mut stream = Stream::open(s.port);
    let mark = |c: &mut Connection, marker: &str| {
        cmd(c, &["SET", marker, "1"]).unwrap();
    };
    // The stream starts with the database it applies to.
    mark(&mut c, "start");
    assert_eq!(stream.until_marker("start"), vec![words(&["SELECT", "0"])]);

    let gcra = ["RL.GCRA", "k", "1", "1000"];
    // An admit: one RL.SETSTATE with the key's state as DUMP would restore it, and the absolute
    // expiry of the key.
    assert_eq!(rl(&mut c, &gcra), [1, 1, 0, -1, 1000]);
    mark(&mut c, "admit");
    let sent = stream.until_marker("admit");
    assert_eq!(
        sent.len(),
        1,
        "{:?}",
        sent.iter().map(|c| text(c)).collect::<Vec<_>>()
    );
    let setstate = &sent[0];
    let expiry = (T0_MS + 1000).to_string();
    assert_eq!(setstate.len(), 3, "{:?}", text(setstate));
    assert_eq!(text(&setstate[..2]), ["RL.SETSTATE", "k"]);
    let effect = &setstate[2];
    assert_eq!(effect[0], 0xE5, "a full state");
    let at = u64::from_le_bytes(effect[1..9].try_into().unwrap());
    assert_eq!(at.to_string(), expiry);
    assert_eq!(
        pexpiretime(&mut c, "k").to_string(),
        expiry,
        "the stream carries the key's own expiry"
    );
    // The effect is the key's state and expiry: applied to another key, it gives the same DUMP
    // and expiry; so does its state in the explicit form (`<state> PXAT <ms>`, the AOF
    // rewrite's and that of earlier versions).
    redis::cmd("RL.SETSTATE")
        .arg("copy")
        .arg(effect.clone())
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(dump(&mut c, "copy"), dump(&mut c, "k"));
    assert_eq!(pexpiretime(&mut c, "copy").to_string(), expiry);
    redis::cmd("RL.SETSTATE")
        .arg("explicit")
        .arg(&effect[9..])
        .arg("PXAT")
        .arg(&expiry)
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(dump(&mut c, "explicit"), dump(&mut c, "k"));
    assert_eq!(pexpiretime(&mut c, "explicit").to_string(), expiry);
    mark(&mut c, "copied");
    stream.until_marker("copied");

    // A denial and a peek: nothing between the markers.
    assert_eq!(rl(&mut c, &gcra), [0, 1, 0, 1000, 1000]);
    mark(&mut c, "denial");
    assert_eq!(stream.until_marker("denial"), Vec::<Vec<Vec<u8>>>::new());
    assert_eq!(
        rl(&mut c, &with(&gcra, &["COST", "0"])),
        [0, 1, 0, 1000, 1000]
    );
    mark(&mut c, "peek");
    assert_eq!(stream.until_marker("peek"), Vec::<Vec<Vec<u8>>>::new());

    // Nor does a lease that grants nothing, or a refund to a missing key.
    let lease = ["RL.LEASE", "lease", "1", "1000", "WANT", "1"];
    assert_eq!(rl(&mut c, &lease)[0], 1);
    mark(&mut c, "granted");
    assert_eq!(stream.until_marker("granted").len(), 1);
    assert_eq!(rl(&mut c, &lease)[0], 0);
    assert_eq!(
        cmd(&mut c, &["RL.REFUND", "missing", "1"]).unwrap(),
        Value::Nil
    );
    mark(&mut c, "nothing");
    assert_eq!(stream.until_marker("nothing"), Vec::<Vec<Vec<u8>>>::new());
}

//! `gryvia-traffic`: traffic with a known ground truth, for the kernel tests of the eBPF
//! programs and for the overhead figures. Prints one JSON line describing what it did.
//!
//! ```text
//! gryvia-traffic tcp --connections N --bytes B --reply R [--addr IP]
//!     N connections one after the other on a fresh port: the client sends B bytes, the server
//!     answers R bytes, the client closes first.
//! gryvia-traffic udp --to IP:PORT --count N --size S [--from IP]
//!     N datagrams of S bytes (from IP, when given); a send the kernel refuses with EPERM (a cgroup program dropped
//!     it) is counted as refused, not an error.
//! gryvia-traffic throughput --seconds S [--addr IP]
//!     one connection sending as fast as it can for S seconds.
//! ```

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("tcp") => tcp(&args[1..]),
        Some("udp") => udp(&args[1..]),
        Some("throughput") => throughput(&args[1..]),
        _ => {
            Err("usage: gryvia-traffic tcp|udp|throughput ... (see the source's header)".to_owned())
        }
    };
    match result {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("gryvia-traffic: {e}");
            std::process::exit(2);
        }
    }
}

fn flag<T: std::str::FromStr>(
    args: &[String],
    name: &str,
    default: Option<T>,
) -> Result<T, String> {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .ok_or_else(|| format!("{name}: missing value"))?
            .parse()
            .map_err(|_| format!("{name}: {:?} is not valid", args[i + 1])),
        None => default.ok_or_else(|| format!("{name}: required")),
    }
}

fn io(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

fn tcp(args: &[String]) -> Result<String, String> {
    let connections: usize = flag(args, "--connections", Some(1))?;
    let bytes: usize = flag(args, "--bytes", Some(100_000))?;
    let reply: usize = flag(args, "--reply", Some(1_000))?;
    let addr: IpAddr = flag(args, "--addr", Some(IpAddr::from([127, 0, 0, 1])))?;
    let listener = TcpListener::bind(SocketAddr::new(addr, 0)).map_err(io("listen"))?;
    let port = listener.local_addr().map_err(io("listen"))?.port();
    let server = std::thread::spawn(move || -> Result<(), String> {
        for _ in 0..connections {
            let (mut s, _) = listener.accept().map_err(io("accept"))?;
            let mut got = 0;
            let mut buf = vec![0u8; 64 * 1024];
            while got < bytes {
                let n = s.read(&mut buf).map_err(io("server read"))?;
                if n == 0 {
                    return Err(format!("client closed after {got} of {bytes} bytes"));
                }
                got += n;
            }
            s.write_all(&vec![b'r'; reply])
                .map_err(io("server write"))?;
            // Wait for the client's close, then close.
            while s.read(&mut buf).map_err(io("server read"))? > 0 {}
        }
        Ok(())
    });
    let payload = vec![b'x'; bytes];
    let mut client_ports = Vec::new();
    for _ in 0..connections {
        let mut c = TcpStream::connect(SocketAddr::new(addr, port)).map_err(io("connect"))?;
        client_ports.push(c.local_addr().map_err(io("connect"))?.port());
        c.write_all(&payload).map_err(io("client write"))?;
        let mut back = vec![0u8; reply];
        c.read_exact(&mut back).map_err(io("client read"))?;
        drop(c); // the client closes first
    }
    server
        .join()
        .map_err(|_| "the server thread panicked".to_owned())??;
    Ok(serde_json::json!({
        "port": port,
        "connections": connections,
        "clientPorts": client_ports,
        "sent": connections * bytes,
        "received": connections * reply,
    })
    .to_string())
}

fn udp(args: &[String]) -> Result<String, String> {
    let to: SocketAddr = flag(args, "--to", None)?;
    let count: usize = flag(args, "--count", Some(100))?;
    let size: usize = flag(args, "--size", Some(200))?;
    let any: IpAddr = if to.is_ipv4() {
        IpAddr::from([0, 0, 0, 0])
    } else {
        IpAddr::from([0u16; 8])
    };
    let from: IpAddr = flag(args, "--from", Some(any))?;
    let s = UdpSocket::bind(SocketAddr::new(from, 0)).map_err(io("bind"))?;
    let local = s.local_addr().map_err(io("bind"))?;
    let data = vec![b'u'; size];
    let mut refused = 0usize;
    for _ in 0..count {
        match s.send_to(&data, to) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => refused += 1,
            Err(e) => return Err(format!("send: {e}")),
        }
        // Paced, so no queue on the path ever drops one.
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(serde_json::json!({"port": local.port(), "count": count, "size": size, "to": to.to_string(), "refused": refused}).to_string())
}

fn throughput(args: &[String]) -> Result<String, String> {
    let seconds: f64 = flag(args, "--seconds", Some(5.0))?;
    let addr: IpAddr = flag(args, "--addr", Some(IpAddr::from([127, 0, 0, 1])))?;
    let listener = TcpListener::bind(SocketAddr::new(addr, 0)).map_err(io("listen"))?;
    let port = listener.local_addr().map_err(io("listen"))?.port();
    let server = std::thread::spawn(move || -> Result<u64, String> {
        let (mut s, _) = listener.accept().map_err(io("accept"))?;
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            let n = s.read(&mut buf).map_err(io("server read"))?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
        }
    });
    let mut c = TcpStream::connect(SocketAddr::new(addr, port)).map_err(io("connect"))?;
    let chunk = vec![b't'; 256 * 1024];
    let start = Instant::now();
    let limit = Duration::from_secs_f64(seconds);
    while start.elapsed() < limit {
        c.write_all(&chunk).map_err(io("client write"))?;
    }
    drop(c);
    let total = server
        .join()
        .map_err(|_| "the server thread panicked".to_owned())??;
    let secs = start.elapsed().as_secs_f64();
    Ok(serde_json::json!({
        "port": port,
        "bytes": total,
        "seconds": secs,
        "gbitPerSecond": total as f64 * 8.0 / secs / 1e9,
    })
    .to_string())
}

//! `gryvia-traffic`: traffic with a known ground truth, for the kernel tests of the eBPF
//! programs and for the overhead figures. Prints one JSON line describing what it did.
//!
//! ```text
//! gryvia-traffic tcp --connections N --bytes B --reply R [--addr IP]
//!     N connections one after the other on a fresh port: the client sends B bytes, the server
//!     answers R bytes, the client closes first.
//! gryvia-traffic udp --to IP:PORT --count N --size S [--from IP] [--new-socket-each]
//!     N datagrams of S bytes (from IP, when given); a send the kernel refuses with EPERM (a cgroup program dropped
//!     it) is counted as refused, not an error. With --new-socket-each, each from a socket of
//!     its own (N flows: a burst of connections).
//! gryvia-traffic peer [--listen IP:PORT] [--to IP:PORT --from IP --rate R --size S] --seconds T [--delay D]
//!     a pod of a collective: counts the datagrams that reach --listen while it sends R datagrams
//!     a second of S bytes to --to, from one ephemeral port of --from, for T seconds (exactly
//!     R x T of them, paced), starting D seconds after it began listening (so every peer of a
//!     test listens before any sends); it listens one second more after its last.
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
        Some("peer") => peer(&args[1..]),
        _ => Err(
            "usage: gryvia-traffic tcp|udp|throughput|peer ... (see the source's header)"
                .to_owned(),
        ),
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

/// The value of `name`, when given.
fn optional<T: std::str::FromStr>(args: &[String], name: &str) -> Result<Option<T>, String> {
    if args.iter().any(|a| a == name) {
        flag(args, name, None).map(Some)
    } else {
        Ok(None)
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
    let fresh = args.iter().any(|a| a == "--new-socket-each");
    let bind = || UdpSocket::bind(SocketAddr::new(from, 0)).map_err(io("bind"));
    // Every socket stays open to the end: a closed one's port could be the next one's, and
    // two datagrams of one port one flow.
    let mut sockets = vec![bind()?];
    let local = sockets[0].local_addr().map_err(io("bind"))?;
    let data = vec![b'u'; size];
    let mut refused = 0usize;
    for i in 0..count {
        if fresh && i > 0 {
            sockets.push(bind()?);
        }
        refused += send(&sockets[sockets.len() - 1], &data, to)?;
        // Paced, so no queue on the path ever drops one.
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(serde_json::json!({"port": local.port(), "count": count, "size": size, "to": to.to_string(), "refused": refused}).to_string())
}

/// Sends one datagram: 1 when the kernel refused it with EPERM (a cgroup program dropped it).
fn send(s: &UdpSocket, data: &[u8], to: SocketAddr) -> Result<usize, String> {
    match s.send_to(data, to) {
        Ok(_) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok(1),
        Err(e) => Err(format!("send: {e}")),
    }
}

/// Counts the datagrams reaching `s` until `stop` is set.
fn receive(
    s: UdpSocket,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Result<u64, String>> {
    std::thread::spawn(move || {
        s.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(io("listen"))?;
        let mut buf = vec![0u8; 65_536];
        let mut n = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            match s.recv(&mut buf) {
                Ok(_) => n += 1,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(format!("receive: {e}")),
            }
        }
        Ok(n)
    })
}

fn peer(args: &[String]) -> Result<String, String> {
    let listen: Option<SocketAddr> = optional(args, "--listen")?;
    let to: Option<SocketAddr> = optional(args, "--to")?;
    let rate: f64 = flag(args, "--rate", Some(100.0))?;
    let size: usize = flag(args, "--size", Some(200))?;
    let seconds: f64 = flag(args, "--seconds", Some(5.0))?;
    let delay: f64 = flag(args, "--delay", Some(1.0))?;
    if !(rate > 0.0 && seconds >= 0.0 && delay >= 0.0) {
        return Err("--rate must be above 0, --seconds and --delay at least 0".to_owned());
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let receiver = match listen {
        Some(addr) => Some(receive(
            UdpSocket::bind(addr).map_err(io("listen"))?,
            stop.clone(),
        )),
        None => None,
    };
    std::thread::sleep(Duration::from_secs_f64(delay));
    let (mut sent, mut refused, mut port) = (0u64, 0usize, None);
    if let Some(to) = to {
        let from: IpAddr = flag(args, "--from", None)?;
        let s = UdpSocket::bind(SocketAddr::new(from, 0)).map_err(io("bind"))?;
        port = Some(s.local_addr().map_err(io("bind"))?.port());
        let data = vec![b'p'; size];
        // Exactly rate x seconds datagrams, each at its time from the start.
        let total = (rate * seconds).round() as u64;
        let start = Instant::now();
        for i in 0..total {
            let at = start + Duration::from_secs_f64(i as f64 / rate);
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            refused += send(&s, &data, to)?;
            sent += 1;
        }
    } else {
        std::thread::sleep(Duration::from_secs_f64(seconds));
    }
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let received = match receiver {
        Some(r) => r
            .join()
            .map_err(|_| "the receiving thread panicked".to_owned())??,
        None => 0,
    };
    Ok(
        serde_json::json!({"port": port, "sent": sent, "refused": refused,
                          "received": received, "size": size})
        .to_string(),
    )
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

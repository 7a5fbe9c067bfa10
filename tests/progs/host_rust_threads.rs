// SPDX-License-Identifier: MIT
// host_rust_threads.rs: a Rust program with std::thread (each thread start calls
// pthread_getattr_np), built by test_hostprogs.c with Debian's rustc -O. Prints a checksum
// that does not depend on scheduling.
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread;

fn main() {
    let (tx, rx) = mpsc::channel();
    let mut hs = Vec::new();
    for i in 0..8u64 {
        let tx = tx.clone();
        hs.push(thread::spawn(move || {
            let mut m: BTreeMap<u64, String> = BTreeMap::new();
            for j in 0..5000u64 {
                m.insert(j * 7 + i, format!("{}:{}", i, j));
            }
            let inner = thread::spawn(move || (0..1000u64).map(|x| vec![x; 8].len() as u64).sum::<u64>());
            let s: u64 = m.values().map(|v| v.len() as u64).sum::<u64>() + inner.join().unwrap();
            tx.send(s).unwrap();
        }));
    }
    drop(tx);
    for h in hs {
        h.join().unwrap();
    }
    let total: u64 = rx.iter().sum();
    println!("rust threads total {}", total);
}

//! A peer announcing a 4 GiB frame is refused without the receiver allocating for it,
//! before and after authentication. A counting global allocator records the largest
//! allocation made while the frame is received; this file holds one test so no other test
//! allocates concurrently.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;
use eckpt_proto::{listen, ClusterSecret, FrameError, FrameKind, ProtoError, DEFAULT_MAX_PAYLOAD};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

struct Counting;

static TRACKING: AtomicBool = AtomicBool::new(false);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if TRACKING.load(Ordering::Relaxed) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if TRACKING.load(Ordering::Relaxed) {
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn header_claiming(len: u32) -> Vec<u8> {
    let mut header = eckpt_proto::encode_frame(FrameKind::Data, &[]).unwrap();
    header[8..12].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c(&header[..16]);
    header[16..20].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Runs `f` and returns its result with the largest single allocation it made.
async fn largest_allocation<T>(f: impl std::future::Future<Output = T>) -> (T, usize) {
    LARGEST.store(0, Ordering::SeqCst);
    TRACKING.store(true, Ordering::SeqCst);
    let out = f.await;
    TRACKING.store(false, Ordering::SeqCst);
    (out, LARGEST.load(Ordering::SeqCst))
}

#[test]
fn four_gib_claims_are_refused_without_allocating() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = listen(
            &"tcp://127.0.0.1:0".parse().unwrap(),
            &ClusterSecret::from_bytes(SECRET),
        )
        .await
        .unwrap();
        let addr = listener.local_endpoint().to_string().replace("tcp://", "");
        let huge = header_claiming(u32::MAX);

        // Before authentication: the first frame announces 4 GiB - 1.
        let mut raw = TcpStream::connect(&addr).await.unwrap();
        raw.write_all(&huge).await.unwrap();
        let incoming = listener.accept().await.unwrap();
        let (result, largest) = largest_allocation(incoming.authenticate()).await;
        let err = result.unwrap_err();
        assert!(
            err.to_string()
                .contains("4294967295 bytes exceeds the limit of 256"),
            "{err}"
        );
        assert!(
            largest < 1 << 20,
            "largest allocation while refusing: {largest} bytes"
        );

        // After authentication: same claim against the 64 MiB default limit.
        let mut raw = TcpStream::connect(&addr).await.unwrap();
        let (server, verdict) = tokio::join!(
            async { listener.accept().await.unwrap().authenticate().await },
            raw_client_handshake(&mut raw, &SECRET)
        );
        verdict.unwrap();
        let mut server = server.unwrap();
        raw.write_all(&huge).await.unwrap();
        let mut buf = Vec::new();
        let (result, largest) = largest_allocation(server.recv_into(&mut buf)).await;
        match result {
            Err(ProtoError::Frame(FrameError::Oversize { len, max })) => {
                assert_eq!(len, u64::from(u32::MAX));
                assert_eq!(max, u64::from(DEFAULT_MAX_PAYLOAD));
            }
            other => panic!("expected oversize, got {other:?}"),
        }
        assert!(
            largest < 1 << 20,
            "largest allocation while refusing: {largest} bytes"
        );
        assert_eq!(buf.capacity(), 0);

        // Control: the allocator does see a legitimate large frame, so the bound above is real.
        let frame = eckpt_proto::encode_frame(FrameKind::Data, &vec![1u8; 4 << 20]).unwrap();
        let (result, largest) = largest_allocation(async {
            let (w, r) = tokio::join!(raw.write_all(&frame), server.recv_data(&mut buf));
            w.unwrap();
            r
        })
        .await;
        result.unwrap();
        assert!(
            largest >= 4 << 20,
            "largest allocation for a 4 MiB frame: {largest}"
        );
    });
}

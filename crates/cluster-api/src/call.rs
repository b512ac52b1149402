//! Requests that name their answers. Each request type says what its answer carries
//! ([`Call::Answer`]); the caller gets that value or an error, and the handler can only give
//! that value ([`Call::reply`]). Reading an answer off the wire ([`answer_of`]) is the one
//! place where an answer of another kind — a peer of another version, a bug — becomes an
//! error, instead of a hand-written match at every call site.

use std::fmt::Debug;

use crate::msg::{
    Abort, AgentRequest, AgentResponse, CancelTask, CodingTask, Commit, Damage, DescribeRequest, Discard,
    ExportItems, FlushPart, FlushRanks, ImportFlushed, ImportRank, Install, LinkSink, LinkTest, MoveRank,
    PurgeNode, PutRank, Scrub, ShardInfo, StopAgent, TaskReport, UpdateTask,
};
use crate::msg::{
    CheckCopy, CoordRequest, CoordResponse, EpochOutcome, ExportFrom, ExportRank, FlushEpoch, FlushReport,
    FlushStatus, Heartbeat, Hello, Inventory, JobClaim, JobGrant, Leave, Locate, NextAttempt, NodeInfo,
    NodePurge, Nodes, OpenEpoch, Opened, Pace, PaceStats, PurgeCluster, RankReady, Recover, RecoveryReport,
    Registered, Registration, ReleaseJob, RenewLease, Status, StatusReport, StopCluster, WaitEpoch,
    WaitFlush,
};
use crate::ClusterError;

/// A request, with the enums it travels in and the answer it gets.
pub trait Call: Sized {
    /// The enum of requests it is sent as.
    type Request;
    /// The enum of answers its answer comes back as.
    type Response;
    /// What the answer carries.
    type Answer;
    /// The request as sent.
    fn request(self) -> Self::Request;
    /// The answer as sent.
    fn reply(answer: Self::Answer) -> Self::Response;
    /// The answer as received; an answer of another kind comes back as it is.
    fn answer(response: Self::Response) -> Result<Self::Answer, Self::Response>;
}

/// A request to the coordinator.
pub trait ToCoordinator: Call<Request = CoordRequest, Response = CoordResponse> {}

impl<C: Call<Request = CoordRequest, Response = CoordResponse>> ToCoordinator for C {}

/// `C`'s answer in `response`, which `who` sent: an answer of another kind is an error
/// naming both.
pub fn answer_of<C: Call>(who: &str, response: C::Response) -> Result<C::Answer, ClusterError>
where
    C::Response: Debug,
{
    C::answer(response).map_err(|other| mismatch(who, short_name::<C>(), &other))
}

/// A request to an agent.
pub trait ToAgent: Call<Request = AgentRequest, Response = AgentResponse> {}

impl<C: Call<Request = AgentRequest, Response = AgentResponse>> ToAgent for C {}

/// `C`'s answer in what the agent of node `node` sent: its error answer becomes the error.
pub fn agent_answer<C>(node: &str, response: AgentResponse) -> Result<C::Answer, ClusterError>
where
    C: Call<Response = AgentResponse>,
{
    match response {
        AgentResponse::Error(e) => Err(ClusterError::remote(node, e)),
        other => answer_of::<C>(&format!("node {node}"), other),
    }
}

/// `C`'s answer in what the coordinator (`who`) sent: its error answer becomes the error.
pub fn coordinator_answer<C>(who: &str, response: CoordResponse) -> Result<C::Answer, ClusterError>
where
    C: Call<Response = CoordResponse>,
{
    match response {
        CoordResponse::Error(e) => Err(ClusterError::from_coordinator(e)),
        other => answer_of::<C>(who, other),
    }
}

/// The error for an answer that is not the one `request` gets.
pub fn mismatch(who: &str, request: &str, answer: &impl Debug) -> ClusterError {
    let answer = format!("{answer:?}");
    let kind = answer.split(['(', ' ', '{']).next().unwrap_or_default();
    ClusterError::Protocol(format!(
        "{who} answered {request} with {kind}: a peer of another version of eckpt?"
    ))
}

fn short_name<C>() -> &'static str {
    let full = std::any::type_name::<C>();
    full.rsplit("::").next().unwrap_or(full)
}

/// `call!(Enum::Variant(Type) => Answers::Variant(AnswerType))`: `Type` is sent as
/// `Enum::Variant` and answered `Answers::Variant` carrying an `AnswerType`;
/// `=> Answers::Variant` for an answer that carries nothing.
macro_rules! call {
    ($request:ident::$sent:ident($call:ty) => $response:ident::$answered:ident($answer:ty)) => {
        impl Call for $call {
            type Request = $request;
            type Response = $response;
            type Answer = $answer;
            fn request(self) -> $request {
                $request::$sent(self)
            }
            fn reply(answer: $answer) -> $response {
                $response::$answered(answer)
            }
            fn answer(response: $response) -> Result<$answer, $response> {
                match response {
                    $response::$answered(answer) => Ok(answer),
                    other => Err(other),
                }
            }
        }
    };
    ($request:ident::$sent:ident($call:ty) => $response:ident::$answered:ident) => {
        impl Call for $call {
            type Request = $request;
            type Response = $response;
            type Answer = ();
            fn request(self) -> $request {
                $request::$sent(self)
            }
            fn reply((): ()) -> $response {
                $response::$answered
            }
            fn answer(response: $response) -> Result<(), $response> {
                match response {
                    $response::$answered => Ok(()),
                    other => Err(other),
                }
            }
        }
    };
}

call!(Hello::Session(Registration) => CoordResponse::Registered(Registered));
call!(CoordRequest::Heartbeat(Heartbeat) => CoordResponse::Alive);
call!(CoordRequest::Holds(Inventory) => CoordResponse::Alive);
call!(CoordRequest::Status(Status) => CoordResponse::Status(Box<StatusReport>));
call!(CoordRequest::Nodes(Nodes) => CoordResponse::Nodes(Vec<NodeInfo>));
call!(CoordRequest::OpenEpoch(OpenEpoch) => CoordResponse::Opened(Opened));
call!(CoordRequest::RankReady(RankReady) => CoordResponse::Ok);
call!(CoordRequest::Pace(Pace) => CoordResponse::Paced(PaceStats));
call!(CoordRequest::WaitEpoch(WaitEpoch) => CoordResponse::Outcome(EpochOutcome));
call!(CoordRequest::Locate(Locate) => CoordResponse::Located(Option<(NodeInfo, u64)>));
call!(CoordRequest::Recover(Recover) => CoordResponse::Recovered(RecoveryReport));
call!(CoordRequest::Export(ExportRank) => CoordResponse::ExportFrom(ExportFrom));
call!(CoordRequest::CheckCopy(CheckCopy) => CoordResponse::CopyDamage(Option<String>));
call!(CoordRequest::Flush(FlushEpoch) => CoordResponse::Flushed(FlushReport));
call!(CoordRequest::WaitFlush(WaitFlush) => CoordResponse::FlushState(Option<FlushStatus>));
call!(CoordRequest::Leave(Leave) => CoordResponse::Ok);
call!(CoordRequest::ClaimJob(JobClaim) => CoordResponse::JobGranted(JobGrant));
call!(CoordRequest::RenewLease(RenewLease) => CoordResponse::Ok);
call!(CoordRequest::NextAttempt(NextAttempt) => CoordResponse::Generation(u64));
call!(CoordRequest::ReleaseJob(ReleaseJob) => CoordResponse::Ok);
call!(CoordRequest::Purge(PurgeCluster) => CoordResponse::Purged(Vec<NodePurge>));
call!(CoordRequest::Shutdown(StopCluster) => CoordResponse::Ok);

call!(AgentRequest::PutRank(PutRank) => AgentResponse::Ok);
call!(AgentRequest::ImportRank(ImportRank) => AgentResponse::Ok);
call!(AgentRequest::Describe(DescribeRequest) => AgentResponse::Shard(ShardInfo));
call!(AgentRequest::Code(CodingTask) => AgentResponse::Task(TaskReport));
call!(AgentRequest::Update(UpdateTask) => AgentResponse::Task(TaskReport));
call!(AgentRequest::Install(Install) => AgentResponse::Ok);
call!(AgentRequest::Commit(Commit) => AgentResponse::Ok);
call!(AgentRequest::Abort(Abort) => AgentResponse::Ok);
call!(AgentRequest::Scrub(Scrub) => AgentResponse::Damage(Damage));
call!(AgentRequest::CancelTask(CancelTask) => AgentResponse::Ok);
call!(AgentRequest::MoveRank(MoveRank) => AgentResponse::Ok);
call!(AgentRequest::Export(ExportItems) => AgentResponse::Items(Vec<(String, u64)>));
call!(AgentRequest::Flush(FlushRanks) => AgentResponse::Flushed(FlushPart));
call!(AgentRequest::ImportFlushed(ImportFlushed) => AgentResponse::Ok);
call!(AgentRequest::LinkTest(LinkTest) => AgentResponse::Link(f64));
call!(AgentRequest::LinkSink(LinkSink) => AgentResponse::Ok);
call!(AgentRequest::Purge(PurgeNode) => AgentResponse::Purged(Vec<std::path::PathBuf>));
call!(AgentRequest::Discard(Discard) => AgentResponse::Ok);
call!(AgentRequest::Shutdown(StopAgent) => AgentResponse::Ok);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_of_its_own_kind_is_taken_and_another_is_one_error_naming_both() {
        let generation = answer_of::<NextAttempt>("the coordinator", NextAttempt::reply(7)).unwrap();
        assert_eq!(generation, 7);
        let err = answer_of::<NextAttempt>("the coordinator", CoordResponse::Ok).unwrap_err();
        assert_eq!(
            err.to_string(),
            ClusterError::Protocol(
                "the coordinator answered NextAttempt with Ok: a peer of another version of eckpt?".into()
            )
            .to_string()
        );
        assert!(answer_of::<RenewLease>("c", RenewLease::reply(())).is_ok());
        assert!(answer_of::<RenewLease>("c", CoordResponse::Alive).is_err());
    }

    #[test]
    fn a_request_travels_as_its_own_variant() {
        let json = serde_json::to_string(
            &WaitEpoch {
                epoch: 3,
                decision_only: false,
            }
            .request(),
        )
        .unwrap();
        assert_eq!(json, r#"{"WaitEpoch":{"epoch":3}}"#);
        let back: CoordRequest = serde_json::from_str(&json).unwrap();
        assert!(matches!(
            back,
            CoordRequest::WaitEpoch(WaitEpoch { epoch: 3, .. })
        ));
    }
}

package feldera

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Stats reads the pipeline's /stats: the incarnation it runs as, its
// state, its output endpoints.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var st Stats
	if err := c.getJSON(ctx, "GET stats", "/stats", &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Checkpoints lists the pipeline's checkpoints, oldest first (GET
// /checkpoints). Each one's Steps says which steps it covers.
func (c *Client) Checkpoints(ctx context.Context) ([]Checkpoint, error) {
	var cps []Checkpoint
	if err := c.getJSON(ctx, "GET checkpoints", "/checkpoints", &cps); err != nil {
		return nil, err
	}
	return cps, nil
}

// CheckpointStatus is GET /checkpoint_status: the sequence numbers of the
// last checkpoint requested through the API that succeeded, and of the
// last that failed, with its error (a later success does not clear it).
// Feldera runs a requested checkpoint in the background, so a failure
// shows only here (controller/checkpoint.rs, CheckpointStatus).
type CheckpointStatus struct {
	Success *uint64            `json:"success"`
	Failure *CheckpointFailure `json:"failure"`
}

// CheckpointFailure is a checkpoint that failed.
type CheckpointFailure struct {
	SequenceNumber uint64 `json:"sequence_number"`
	Error          string `json:"error"`
}

// CheckpointStatus reads /checkpoint_status.
func (c *Client) CheckpointStatus(ctx context.Context) (*CheckpointStatus, error) {
	var cs CheckpointStatus
	if err := c.getJSON(ctx, "GET checkpoint_status", "/checkpoint_status", &cs); err != nil {
		return nil, err
	}
	return &cs, nil
}

// RequestCheckpoint asks for a checkpoint (POST /checkpoint) and returns
// its sequence number; the checkpoint itself runs in the background, and a
// request that arrives while one is being written is answered by that one
// (it may not cover what was processed just before): check coverage with
// Checkpoints. Without Enterprise fault tolerance Feldera answers 501
// EnterpriseFeature (see IsCheckpointUnsupported).
func (c *Client) RequestCheckpoint(ctx context.Context) (uint64, error) {
	resp, err := c.do(ctx, http.MethodPost, "/checkpoint", "", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := checkResponse("POST checkpoint", resp); err != nil {
		return 0, err
	}
	var r struct {
		Seq uint64 `json:"checkpoint_sequence_number"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, fmt.Errorf("feldera: decode checkpoint answer: %w", err)
	}
	return r.Seq, nil
}

// StartTransaction opens the pipeline's API transaction (POST
// /start_transaction) and returns its ID. It is sent once, never retried:
// after an unclear answer only /stats can say whether it opened. 409
// TransactionInProgress (IsTransactionInProgress) means the API already
// holds one.
func (c *Client) StartTransaction(ctx context.Context) (int64, error) {
	resp, err := c.send(ctx, c.once, http.MethodPost, "/start_transaction", "", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := checkResponse("POST start_transaction", resp); err != nil {
		return 0, err
	}
	var r struct {
		ID *int64 `json:"transaction_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.ID == nil {
		return 0, &APIError{Op: "POST start_transaction", StatusCode: resp.StatusCode, Message: "answer has no transaction_id"}
	}
	return *r.ID, nil
}

// CommitTransaction asks Feldera to commit the API transaction (POST
// /commit_transaction). It only starts the commit: it has finished once
// /stats global_metrics.transaction_id differs from the transaction's ID.
// 400 NoTransactionInProgress (IsNoTransactionInProgress) means none is
// open.
func (c *Client) CommitTransaction(ctx context.Context) error {
	resp, err := c.send(ctx, c.once, http.MethodPost, "/commit_transaction", "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return checkResponse("POST commit_transaction", resp)
}

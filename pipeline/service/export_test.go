package service

import (
	"context"

	"github.com/compactor/compactor/schemas"
)

// WrapForget makes the service's forget run through f, which is given the real one:
// a test makes a forget wait on something it controls.
func (s *Service) WrapForget(f func(ctx context.Context, conv string, forget func(context.Context, string) (schemas.ForgetResponse, error)) (schemas.ForgetResponse, error)) {
	real := s.forget
	s.forget = func(ctx context.Context, conv string) (schemas.ForgetResponse, error) { return f(ctx, conv, real) }
}
